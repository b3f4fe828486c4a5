// Package identity owns the node's persistent identity: its nodeId, display
// name, Ed25519 signing key (also the libp2p host key) and X25519 E2E key, kept
// in $CMBNODE_HOME/identity.json (spec/mmp.md §1).
//
// An identity is minted once and never silently replaced: MMP v1 has no key
// rotation, so a new identity is a new node to every peer. Every problem with
// an existing file is therefore an error for the operator to resolve.
//
// File format (pretty-printed JSON, mode 0600):
//
//	{
//	  "nodeId": "0192e4a2-7b5c-7def-8a3b-9c4d5e6f7a8b",  // UUIDv7, lowercase
//	  "name": "build-box",                               // display only
//	  "hostname": "build-box",                           // display only, optional
//	  "createdAt": 1767225600000,                        // Unix ms
//	  "ed25519Seed": "<base64url, unpadded, 32 bytes>",  // the secret
//	  "publicKey": "<base64url, unpadded, 32 bytes>",    // derived; for humans, checked on load
//	  "x25519Private": "<base64url, unpadded, 32 bytes>",
//	  "x25519Public": "<std base64 of the 44-byte DER SPKI>"
//	}
//
// x25519Public is written in the DER-SPKI form because that is exactly the
// handshake's e2ePublicKey, so an operator can compare it with what peers
// see; on load the raw base64url form is accepted too. It is checked against
// x25519Private.
package identity

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/node/secretfile"
)

// FileName is the identity file inside the home directory.
const FileName = "identity.json"

// HomeEnv names the environment variable that overrides the default home.
const HomeEnv = "CMBNODE_HOME"

// fallbackName is used when the hostname cannot serve as a display name.
const fallbackName = "cmbnode"

// maxFileSize bounds what Load reads; a real identity file is under 1 KiB, so
// anything near this is not one.
const maxFileSize = 64 << 10

// Errors for errors.Is. Messages that wrap them name the file and the fix.
var (
	// ErrExists: Create found an identity already in place.
	ErrExists = errors.New("identity already exists")
	// ErrInsecure: the identity file is accessible to group or others.
	ErrInsecure = errors.New("identity file permissions are too open")
	// ErrInvalid: the identity file is unreadable as an identity.
	ErrInvalid = errors.New("invalid identity file")
)

// Identity is a node's identity as loaded into memory.
type Identity struct {
	NodeID    string
	Name      string
	Hostname  string // display only, may be empty
	CreatedAt time.Time
	Ed25519   ed25519.PrivateKey
	X25519    *ecdh.PrivateKey
}

// PublicKey is the Ed25519 public key peers know this node by.
func (id *Identity) PublicKey() ed25519.PublicKey {
	return id.Ed25519.Public().(ed25519.PublicKey)
}

// PublicKeyB64 is PublicKey as unpadded base64url, its form on every MMP wire surface.
func (id *Identity) PublicKeyB64() string {
	return base64.RawURLEncoding.EncodeToString(id.PublicKey())
}

// E2EPublicKeyDER is the X25519 public key as the handshake's e2ePublicKey
// carries it (standard base64 of the DER SPKI).
func (id *Identity) E2EPublicKeyDER() string {
	return e2e.EncodePublicKeyDER(id.X25519.PublicKey())
}

// Path is the identity file for home.
func Path(home string) string {
	return filepath.Join(home, FileName)
}

// DefaultHome is $CMBNODE_HOME if set, else ~/.cmbnode.
func DefaultHome() (string, error) {
	if h := os.Getenv(HomeEnv); h != "" {
		return h, nil
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the cmbnode home directory: %w (set %s or pass --home)", err, HomeEnv)
	}
	return filepath.Join(u, ".cmbnode"), nil
}

// DefaultName is the display name a node gets when none is given: the
// hostname (or "cmbnode" when there is none or it is not a valid name)
// and a short id, "vm-1a2b", so that the nodes of a lab whose machines
// share a hostname still tell apart in status and peers. The short id is
// the last 4 hex digits of nodeID: a nodeId is a UUIDv7, whose leading
// digits are its creation time (the same for weeks) and whose last ones
// are random. A name given explicitly is kept as it is.
func DefaultName(nodeID string) string {
	base := fallbackName
	if h, err := os.Hostname(); err == nil {
		base = nameFromHostname(h)
	}
	return withShortID(base, nodeID)
}

// withShortID appends "-" and the last 4 hex digits of nodeID to base,
// cutting base (on a rune boundary) so the whole stays a valid name.
func withShortID(base, nodeID string) string {
	hex := strings.ReplaceAll(nodeID, "-", "")
	if len(hex) < 4 {
		return base
	}
	suffix := "-" + hex[len(hex)-4:]
	return cutBytes(base, cmb.MaxNameBytes-len(suffix)) + suffix
}

// cutBytes cuts s to at most n bytes on a rune boundary, so truncation
// cannot leave invalid UTF-8.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func nameFromHostname(h string) string {
	h = cutBytes(strings.TrimSpace(h), cmb.MaxNameBytes)
	if cmb.ValidateName(h) != nil {
		return fallbackName
	}
	return h
}

// Create mints a new identity and writes it to home, creating home (0700)
// if needed. An empty name means DefaultName of the new nodeId. random supplies key material
// and the nodeId's random bits (nil means crypto/rand). Create never replaces
// an existing identity file.
func Create(home, name string, random io.Reader) (*Identity, error) {
	if name != "" {
		if err := cmb.ValidateName(name); err != nil {
			return nil, fmt.Errorf("create identity: %w", err)
		}
	}
	id, err := generate(name, random, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create identity: %w", err)
	}
	if id.Name == "" {
		id.Name = DefaultName(id.NodeID)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("create identity: make home directory: %w", err)
	}
	data, err := json.MarshalIndent(toFile(id), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("create identity: encode: %w", err)
	}
	if err := writeNew(Path(home), append(data, '\n')); err != nil {
		return nil, fmt.Errorf("create identity: %w", err)
	}
	return id, nil
}

func generate(name string, random io.Reader, now time.Time) (*Identity, error) {
	if random == nil {
		random = rand.Reader
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(random, seed); err != nil {
		return nil, fmt.Errorf("read random Ed25519 seed: %w", err)
	}
	// e2e.GenerateKey reads from random itself; ecdh.GenerateKey would not
	// (Go 1.26 ignores its reader), which would make tests nondeterministic.
	x, err := e2e.GenerateKey(random)
	if err != nil {
		return nil, err
	}
	u, err := uuid.NewV7FromReader(random)
	if err != nil {
		return nil, fmt.Errorf("mint nodeId: %w", err)
	}
	host, _ := os.Hostname() // display only; absent is fine
	return &Identity{
		NodeID:   strings.ToLower(u.String()),
		Name:     name,
		Hostname: host,
		// Milliseconds are what the file holds; truncating here makes the
		// returned value equal to what Load will read back.
		CreatedAt: time.UnixMilli(now.UnixMilli()),
		Ed25519:   ed25519.NewKeyFromSeed(seed),
		X25519:    x,
	}, nil
}

// Load reads the identity in home. A missing file yields an error matching
// fs.ErrNotExist; any other problem is an error naming the file and the fix.
func Load(home string) (*Identity, error) {
	path := Path(home)
	data, err := readPrivateFile(path)
	if err != nil {
		return nil, err
	}
	id, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("load identity %s: %w: %w; restore the file from a backup, or move it aside to start as a new node (peers will see a different node)", path, ErrInvalid, err)
	}
	return id, nil
}

// LoadOrCreate loads the identity in home, creating one named name (empty
// means DefaultName) only when no file exists. name is ignored for an
// existing identity. A damaged file is an error, never a reason to mint.
func LoadOrCreate(home, name string) (id *Identity, created bool, err error) {
	id, err = Load(home)
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	id, err = Create(home, name, nil)
	if err == nil {
		return id, true, nil
	}
	if errors.Is(err, ErrExists) {
		// Another process created it between our Load and Create; use theirs.
		id, err = Load(home)
		return id, false, err
	}
	return nil, false, err
}

func readPrivateFile(path string) ([]byte, error) {
	data, err := secretfile.Read(path, maxFileSize)
	var se *secretfile.Error
	switch {
	case err == nil:
		return data, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("load identity: %s: %w (run `cmbnode init` or start the daemon to create one)", path, fs.ErrNotExist)
	case errors.Is(err, secretfile.ErrInsecure) && errors.As(err, &se):
		return nil, fmt.Errorf("load identity: %w: %s holds private keys but has mode %04o, open to group or others; run: chmod 600 %s", ErrInsecure, path, se.Mode, path)
	case errors.Is(err, secretfile.ErrTooLarge):
		return nil, fmt.Errorf("load identity: %s is over %d bytes, too large to be an identity file: %w", path, maxFileSize, ErrInvalid)
	case errors.Is(err, secretfile.ErrNotRegular):
		return nil, fmt.Errorf("load identity: %s is not a regular file: %w", path, ErrInvalid)
	}
	return nil, fmt.Errorf("load identity: %w", err)
}
