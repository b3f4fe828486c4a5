package cgpnode

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/secretfile"
)

// TokenFileName is the CGP HTTP binding's bearer token file in the home:
// one line, mode 0600, minted on the first start that serves the binding
// without a configured token. Deleting it and restarting rotates the token.
const TokenFileName = "cgp-http.token"

// TokenPath is the token file for home.
func TokenPath(home string) string { return filepath.Join(home, TokenFileName) }

// Errors for errors.Is, wrapped in a *TokenFileError.
var (
	// ErrTokenInsecure: the token file is accessible to group or others.
	ErrTokenInsecure = errors.New("CGP HTTP token file permissions are too open")
	// ErrTokenInvalid: the token file does not hold a usable token.
	ErrTokenInvalid = errors.New("invalid CGP HTTP token file")
)

// TokenFileError is a token file the binding refuses to use. It never holds
// the token itself.
type TokenFileError struct {
	Path string
	// Mode is the file's permission bits when Err is ErrTokenInsecure.
	Mode fs.FileMode
	// Err is ErrTokenInsecure, or ErrTokenInvalid joined with the reason.
	Err error
}

func (e *TokenFileError) Error() string {
	if errors.Is(e.Err, ErrTokenInsecure) {
		return fmt.Sprintf("load CGP HTTP token: %v: %s holds the bearer token but has mode %04o, open to group or others; run: chmod 600 %s", ErrTokenInsecure, e.Path, e.Mode, e.Path)
	}
	return fmt.Sprintf("load CGP HTTP token: %s: %v (delete it and restart to mint a new token)", e.Path, e.Err)
}

func (e *TokenFileError) Unwrap() error { return e.Err }

// maxTokenFile bounds what is read: a token is one short line.
const maxTokenFile = 4 << 10

// LoadOrCreateToken returns the bearer token in home's token file, minting
// one (32 random bytes, base64url) into a new 0600 file if there is none.
// An existing file is used only if group and others cannot access it and it
// holds a usable token; it is never rewritten, so a token the operator put
// there stays theirs.
func LoadOrCreateToken(home string) (token string, created bool, err error) {
	path := TokenPath(home)
	tok, err := readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	tok, err = mintToken(path)
	if errors.Is(err, fs.ErrExist) {
		// Another process minted it between the read and the link; use theirs.
		tok, err = readToken(path)
		return tok, false, err
	}
	return tok, err == nil, err
}

func readToken(path string) (string, error) {
	data, err := secretfile.Read(path, maxTokenFile)
	var se *secretfile.Error
	switch {
	case errors.Is(err, secretfile.ErrInsecure) && errors.As(err, &se):
		return "", &TokenFileError{Path: path, Mode: se.Mode, Err: ErrTokenInsecure}
	case errors.As(err, &se):
		return "", &TokenFileError{Path: path, Err: fmt.Errorf("%w: %w", ErrTokenInvalid, se)}
	case err != nil:
		return "", fmt.Errorf("load CGP HTTP token: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if err := cgp.CheckBearerToken(tok); err != nil {
		return "", &TokenFileError{Path: path, Err: fmt.Errorf("%w: %w", ErrTokenInvalid, err)}
	}
	return tok, nil
}

// mintToken writes a fresh token to path, atomically, mode 0600, and only
// if path does not exist (the error then wraps fs.ErrExist): a crash leaves
// no file or the whole token, never an empty file that would stop the next
// start.
func mintToken(path string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mint CGP HTTP token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	if err := secretfile.WriteNew(path, []byte(tok+"\n")); err != nil {
		return "", fmt.Errorf("mint CGP HTTP token: %w", err)
	}
	return tok, nil
}
