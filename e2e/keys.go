// Package e2e implements the end-to-end field encryption that MMP 1.x nodes
// actually deploy (spec/mmp.md §9.1, sym-reference §9.1): static X25519 keys,
// the raw X25519 output used directly as an AES-256-GCM key, a 12-byte random
// nonce, no AAD, and standard base64 on the wire.
//
// The scheme is the reference runtime's, not the spec prose's
// (XChaCha20-Poly1305, spec/mmp.md §14 A6): it is what interoperates with 1.x
// peers. It has no KDF and no key confirmation; do not reuse it for anything new.
//
// The package works on bytes. Turning a CMB's fields object into plaintext
// (its JSON) and back is the caller's job.
package e2e

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/cmbnode/cmbnode/cmb"
)

// KeySize is the length of a raw X25519 private or public key.
const KeySize = 32

// ErrKey is wrapped by every failure to parse or use a key.
var ErrKey = errors.New("not a usable X25519 key")

// GenerateKey makes a new X25519 private key from 32 bytes of random (nil
// means crypto/rand). The bytes are read here rather than by ecdh.GenerateKey
// because since Go 1.26 that ignores its reader, and callers (tests, the
// identity package) rely on a supplied reader being honoured.
func GenerateKey(random io.Reader) (*ecdh.PrivateKey, error) {
	if random == nil {
		random = rand.Reader
	}
	b := make([]byte, KeySize)
	if _, err := io.ReadFull(random, b); err != nil {
		return nil, fmt.Errorf("generate X25519 key: read random bytes: %w", err)
	}
	k, err := ecdh.X25519().NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("generate X25519 key: %w", err)
	}
	return k, nil
}

// ParsePublicKey reads an X25519 public key in either form peers use: raw 32
// bytes as base64url (unpadded, as we write it), or standard base64 of the
// 44-byte DER SubjectPublicKeyInfo (what the reference runtime sends in the
// handshake). Either alphabet and optional padding are accepted.
func ParsePublicKey(s string) (*ecdh.PublicKey, error) {
	b, err := cmb.DecodeBase64(s)
	if err != nil {
		return nil, fmt.Errorf("parse X25519 public key: %w: %w", ErrKey, err)
	}
	if len(b) == KeySize {
		k, err := ecdh.X25519().NewPublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("parse X25519 public key: %w: %w", ErrKey, err)
		}
		return k, nil
	}
	parsed, err := x509.ParsePKIXPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("parse X25519 public key: %w: %d bytes is neither a raw 32-byte key nor DER SPKI: %w", ErrKey, len(b), err)
	}
	k, ok := parsed.(*ecdh.PublicKey)
	if !ok || k.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("parse X25519 public key: %w: the DER holds a %T key", ErrKey, parsed)
	}
	return k, nil
}

// ParsePrivateKey reads an X25519 private key: raw 32 bytes as base64url, or
// standard base64 of the PKCS#8 DER the reference runtime keeps in
// e2e-keypair.json. Either alphabet and optional padding are accepted.
func ParsePrivateKey(s string) (*ecdh.PrivateKey, error) {
	b, err := cmb.DecodeBase64(s)
	if err != nil {
		return nil, fmt.Errorf("parse X25519 private key: %w: %w", ErrKey, err)
	}
	if len(b) == KeySize {
		k, err := ecdh.X25519().NewPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("parse X25519 private key: %w: %w", ErrKey, err)
		}
		return k, nil
	}
	parsed, err := x509.ParsePKCS8PrivateKey(b)
	if err != nil {
		// The x509 error is deliberately not included: it can quote key bytes.
		return nil, fmt.Errorf("parse X25519 private key: %w: %d bytes is neither a raw 32-byte key nor PKCS#8 DER", ErrKey, len(b))
	}
	k, ok := parsed.(*ecdh.PrivateKey)
	if !ok || k.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("parse X25519 private key: %w: the PKCS#8 holds a %T key", ErrKey, parsed)
	}
	return k, nil
}

// EncodePublicKeyDER returns standard padded base64 of the DER SPKI
// (302a300506032b656e032100 || key), the form the handshake's e2ePublicKey
// carries and the only one the reference runtime parses. It always starts
// with "MCowBQYDK2VuAyEA".
//
// The key must be X25519 (every key this package returns is); another curve
// is a programming error and panics.
func EncodePublicKeyDER(pub *ecdh.PublicKey) string {
	mustX25519(pub.Curve())
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic("e2e: marshal X25519 public key: " + err.Error())
	}
	return base64.StdEncoding.EncodeToString(der)
}

// EncodePublicKeyRaw returns the raw 32-byte key as unpadded base64url, the
// encoding MMP uses for keys on every other surface. Panics on a non-X25519 key.
func EncodePublicKeyRaw(pub *ecdh.PublicKey) string {
	mustX25519(pub.Curve())
	return base64.RawURLEncoding.EncodeToString(pub.Bytes())
}

// EncodePrivateKeyRaw returns the raw 32-byte private key as unpadded
// base64url. Panics on a non-X25519 key.
func EncodePrivateKeyRaw(priv *ecdh.PrivateKey) string {
	mustX25519(priv.Curve())
	return base64.RawURLEncoding.EncodeToString(priv.Bytes())
}

// EncodePrivateKeyPKCS8 returns standard padded base64 of the 48-byte PKCS#8
// DER, the form the reference runtime stores. Panics on a non-X25519 key.
func EncodePrivateKeyPKCS8(priv *ecdh.PrivateKey) string {
	mustX25519(priv.Curve())
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic("e2e: marshal X25519 private key: " + err.Error())
	}
	return base64.StdEncoding.EncodeToString(der)
}

func mustX25519(c ecdh.Curve) {
	if c != ecdh.X25519() {
		panic(fmt.Sprintf("e2e: key is on %v, only X25519 is supported", c))
	}
}
