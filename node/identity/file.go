package identity

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/node/secretfile"
)

// fileV1 is identity.json. Pointers tell a missing member from an empty one.
type fileV1 struct {
	NodeID        *string `json:"nodeId"`
	Name          *string `json:"name"`
	Hostname      string  `json:"hostname,omitempty"`
	CreatedAt     *int64  `json:"createdAt"`
	Ed25519Seed   *string `json:"ed25519Seed"`
	PublicKey     *string `json:"publicKey"`
	X25519Private *string `json:"x25519Private"`
	X25519Public  *string `json:"x25519Public"`
}

func toFile(id *Identity) fileV1 {
	str := func(s string) *string { return &s }
	ms := id.CreatedAt.UnixMilli()
	return fileV1{
		NodeID:        str(id.NodeID),
		Name:          str(id.Name),
		Hostname:      id.Hostname,
		CreatedAt:     &ms,
		Ed25519Seed:   str(base64.RawURLEncoding.EncodeToString(id.Ed25519.Seed())),
		PublicKey:     str(id.PublicKeyB64()),
		X25519Private: str(e2e.EncodePrivateKeyRaw(id.X25519)),
		X25519Public:  str(id.E2EPublicKeyDER()),
	}
}

// parse checks every member; the error text says which one is wrong and how.
func parse(data []byte) (*Identity, error) {
	var f fileV1
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not valid identity JSON: %w", err)
	}
	for _, m := range []struct {
		name    string
		missing bool
	}{
		{"nodeId", f.NodeID == nil},
		{"name", f.Name == nil},
		{"createdAt", f.CreatedAt == nil},
		{"ed25519Seed", f.Ed25519Seed == nil},
		{"publicKey", f.PublicKey == nil},
		{"x25519Private", f.X25519Private == nil},
		{"x25519Public", f.X25519Public == nil},
	} {
		if m.missing {
			return nil, fmt.Errorf("member %q is missing", m.name)
		}
	}
	if err := cmb.ValidateNodeID(*f.NodeID); err != nil {
		return nil, fmt.Errorf("nodeId: %w", err)
	}
	if err := cmb.ValidateName(*f.Name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	if *f.CreatedAt <= 0 {
		return nil, fmt.Errorf("createdAt %d is not a positive Unix time in milliseconds", *f.CreatedAt)
	}

	seed, err := cmb.DecodeBase64(*f.Ed25519Seed)
	if err != nil {
		return nil, fmt.Errorf("ed25519Seed: %w", err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("ed25519Seed is %d bytes, an Ed25519 seed is %d", len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub, err := cmb.DecodeBase64(*f.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("publicKey: %w", err)
	}
	if !bytes.Equal(pub, priv.Public().(ed25519.PublicKey)) {
		return nil, errors.New("publicKey does not match ed25519Seed")
	}

	x, err := e2e.ParsePrivateKey(*f.X25519Private)
	if err != nil {
		return nil, fmt.Errorf("x25519Private: %w", err)
	}
	xPub, err := e2e.ParsePublicKey(*f.X25519Public)
	if err != nil {
		return nil, fmt.Errorf("x25519Public: %w", err)
	}
	if !x.PublicKey().Equal(xPub) {
		return nil, errors.New("x25519Public does not match x25519Private")
	}

	return &Identity{
		// Lowercase because MMP compares nodeIds case-insensitively but
		// emits lowercase; a hand-edited file should not leak uppercase.
		NodeID:    strings.ToLower(*f.NodeID),
		Name:      *f.Name,
		Hostname:  f.Hostname,
		CreatedAt: time.UnixMilli(*f.CreatedAt),
		Ed25519:   priv,
		X25519:    x,
	}, nil
}

// writeNew writes the identity file once: atomically, mode 0600, and never
// over an existing one (the loser of two concurrent mints gets ErrExists).
func writeNew(path string, data []byte) error {
	err := secretfile.WriteNew(path, data)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w at %s; refusing to overwrite it (it is this node's identity; move it aside only if you mean to become a new node)", ErrExists, path)
	}
	if err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	return nil
}

// LoadSeedFile reads an Ed25519 seed (32 bytes, base64url; any base64 form
// accepted, surrounding whitespace ignored) for `--key-file`.
func LoadSeedFile(path string) (ed25519.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	defer f.Close()
	// A seed is 43 characters; a bound keeps a wrong path from reading a huge file.
	data, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return nil, fmt.Errorf("read key file %s: %w", path, err)
	}
	seed, err := cmb.DecodeBase64(string(data))
	if err != nil {
		return nil, fmt.Errorf("read key file %s: expected a base64url Ed25519 seed: %w", path, err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("read key file %s: holds %d bytes, an Ed25519 seed is %d (base64url, 43 characters)", path, len(seed), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}
