package cgpnode

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"cmbnode/node/cgp"
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
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("load CGP HTTP token: %w", err)
	}
	defer f.Close()
	// Stat the open file, not the path, so the check applies to what we read.
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("load CGP HTTP token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", &TokenFileError{Path: path, Err: fmt.Errorf("%w: not a regular file", ErrTokenInvalid)}
	}
	// Windows does not map group/other onto these bits.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return "", &TokenFileError{Path: path, Mode: fi.Mode().Perm(), Err: ErrTokenInsecure}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("load CGP HTTP token: read %s: %w", path, err)
	}
	if len(data) > maxTokenFile {
		return "", &TokenFileError{Path: path, Err: fmt.Errorf("%w: over %d bytes, too large to be a token", ErrTokenInvalid, maxTokenFile)}
	}
	tok := strings.TrimSpace(string(data))
	if err := cgp.CheckBearerToken(tok); err != nil {
		return "", &TokenFileError{Path: path, Err: fmt.Errorf("%w: %w", ErrTokenInvalid, err)}
	}
	return tok, nil
}

// mintToken writes a fresh token to path atomically and only if path does
// not exist: a crash leaves no file or the whole token, never an empty file
// that would stop the next start. It fails with fs.ErrExist if path exists.
func mintToken(path string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mint CGP HTTP token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".cgp-http-token-*.tmp") // created 0600
	if err != nil {
		return "", fmt.Errorf("mint CGP HTTP token: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after the link this only drops the temp name
	if _, err := tmp.WriteString(tok + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("mint CGP HTTP token: write %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("mint CGP HTTP token: flush %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("mint CGP HTTP token: %w", err)
	}
	// A hard link publishes the whole file under its name and fails if the
	// name is taken, so a concurrent mint cannot be overwritten.
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("mint CGP HTTP token: %w", err)
		}
		// Some filesystems have no hard links; rename is still atomic, and
		// the read before minting is the (racy) guard against overwriting.
		if err := os.Rename(tmpName, path); err != nil {
			return "", fmt.Errorf("mint CGP HTTP token: publish %s: %w", path, err)
		}
	}
	return tok, nil
}
