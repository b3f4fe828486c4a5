package e2e

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/cmbnode/cmbnode/cmb"
)

const (
	// NonceSize is the AES-GCM nonce length the reference runtime uses.
	NonceSize = 12
	// TagSize is the GCM tag appended to the ciphertext.
	TagSize = 16
)

// Errors from Seal and Open, for errors.Is. Each is wrapped with what was
// being done, so the message alone is fit to show a user.
var (
	// ErrEncoding: the ciphertext or nonce is not base64.
	ErrEncoding = errors.New("not valid base64")
	// ErrNonceSize: the nonce does not decode to NonceSize bytes.
	ErrNonceSize = errors.New("nonce must be 12 bytes")
	// ErrTruncated: the ciphertext is too short to hold even the GCM tag.
	ErrTruncated = errors.New("ciphertext is shorter than the 16-byte authentication tag")
	// ErrAuth: the tag does not verify — the ciphertext, tag or nonce was
	// altered, or it was sealed for a different key pair.
	ErrAuth = errors.New("authentication failed: the sealed data was altered or is not for this key pair")
	// ErrLowOrder: the peer's public key is a low-order point, so the shared
	// secret would be all zeros and the "encryption" would use a public key.
	ErrLowOrder = errors.New("peer X25519 public key is a low-order point (all-zero shared secret)")
)

// Box seals for and opens from one peer. It holds the AES-GCM state derived
// from X25519(own private, peer public), so a node that exchanges many
// records with the same peer does the key agreement once. X25519 is
// symmetric: the sender's Box (sender priv, recipient pub) and the
// recipient's Box (recipient priv, sender pub) hold the same key.
type Box struct {
	aead cipher.AEAD
}

// NewBox derives the shared key between own and peer.
func NewBox(own *ecdh.PrivateKey, peer *ecdh.PublicKey) (*Box, error) {
	if own == nil || peer == nil {
		return nil, fmt.Errorf("e2e key agreement: %w: key is missing", ErrKey)
	}
	if own.Curve() != ecdh.X25519() || peer.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("e2e key agreement: %w: both keys must be X25519", ErrKey)
	}
	shared, err := own.ECDH(peer)
	if err != nil {
		// crypto/ecdh refuses an all-zero X25519 output; that is its only
		// failure for two valid X25519 keys.
		return nil, fmt.Errorf("e2e key agreement: %w: %w", ErrLowOrder, err)
	}
	// The reference runtime uses the raw DH output as the AES-256 key with no
	// KDF; anything else would not interoperate with 1.x peers.
	block, err := aes.NewCipher(shared)
	if err != nil {
		return nil, fmt.Errorf("e2e key agreement: set up AES-256: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("e2e key agreement: set up GCM: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext under a fresh 12-byte nonce read from random (nil
// means crypto/rand) and returns standard padded base64 of ciphertext||tag
// and of the nonce — the values of a sealed CMB's fields and _e2e.nonce.
func (b *Box) Seal(plaintext []byte, random io.Reader) (ciphertext, nonce string, err error) {
	if random == nil {
		random = rand.Reader
	}
	n := make([]byte, NonceSize)
	if _, err := io.ReadFull(random, n); err != nil {
		return "", "", fmt.Errorf("e2e seal: read random nonce: %w", err)
	}
	ct, err := b.SealWithNonce(plaintext, n)
	if err != nil {
		return "", "", err
	}
	return ct, base64.StdEncoding.EncodeToString(n), nil
}

// SealWithNonce is Seal with a caller-chosen nonce. It exists for
// known-answer tests; reusing a nonce with the same key pair breaks GCM's
// confidentiality and authenticity, so production code calls Seal.
func (b *Box) SealWithNonce(plaintext, nonce []byte) (string, error) {
	if len(nonce) != NonceSize {
		return "", fmt.Errorf("e2e seal: nonce is %d bytes: %w", len(nonce), ErrNonceSize)
	}
	sealed := b.aead.Seal(nil, nonce, plaintext, nil)
	return base64.StdEncoding.EncodeToString(sealed), nil
}

// Open authenticates and decrypts ciphertext (base64 of ciphertext||tag)
// with nonce (base64). Either base64 alphabet, padded or not, is accepted.
func (b *Box) Open(ciphertext, nonce string) ([]byte, error) {
	n, err := cmb.DecodeBase64(nonce)
	if err != nil {
		return nil, fmt.Errorf("e2e open: nonce: %w: %w", ErrEncoding, err)
	}
	if len(n) != NonceSize {
		return nil, fmt.Errorf("e2e open: nonce is %d bytes: %w", len(n), ErrNonceSize)
	}
	ct, err := cmb.DecodeBase64(ciphertext)
	if err != nil {
		return nil, fmt.Errorf("e2e open: ciphertext: %w: %w", ErrEncoding, err)
	}
	if len(ct) < TagSize {
		return nil, fmt.Errorf("e2e open: ciphertext is %d bytes: %w", len(ct), ErrTruncated)
	}
	pt, err := b.aead.Open(nil, n, ct, nil)
	if err != nil {
		return nil, fmt.Errorf("e2e open: %w", ErrAuth)
	}
	return pt, nil
}

// Seal encrypts plaintext from own to peer; see Box.Seal. Use a Box instead
// when sealing for the same peer repeatedly.
func Seal(plaintext []byte, own *ecdh.PrivateKey, peer *ecdh.PublicKey, random io.Reader) (ciphertext, nonce string, err error) {
	b, err := NewBox(own, peer)
	if err != nil {
		return "", "", err
	}
	return b.Seal(plaintext, random)
}

// SealWithNonce is Seal with a fixed nonce, for known-answer tests only.
func SealWithNonce(plaintext []byte, own *ecdh.PrivateKey, peer *ecdh.PublicKey, nonce []byte) (string, error) {
	b, err := NewBox(own, peer)
	if err != nil {
		return "", err
	}
	return b.SealWithNonce(plaintext, nonce)
}

// Open decrypts what sender sealed for own; see Box.Open.
func Open(ciphertext, nonce string, own *ecdh.PrivateKey, sender *ecdh.PublicKey) ([]byte, error) {
	b, err := NewBox(own, sender)
	if err != nil {
		return nil, err
	}
	return b.Open(ciphertext, nonce)
}
