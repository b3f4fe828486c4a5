package cmb

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha512"

	"filippo.io/edwards25519"
)

// VerifyKey is an Ed25519 public key decoded once for many verifications.
// crypto/ed25519.Verify decodes the key's point on every call (a square
// root in the field, about a tenth of a verification), while a group's
// records come from few authors, so a receiver keeps one VerifyKey per
// author key.
//
// Verify accepts exactly what crypto/ed25519.Verify accepts: it runs the
// same steps on the same edwards25519 arithmetic (RFC 8032's cofactorless
// equation, canonical S, R compared as its canonical encoding); only the
// key's decoding is done ahead. TestVerifyKeyIsEd25519Verify and
// FuzzVerifyKey hold the two equal, edge cases included.
type VerifyKey struct {
	pub    [ed25519.PublicKeySize]byte
	ok     bool // pub decodes to a curve point
	minusA edwards25519.Point
}

// NewVerifyKey decodes pub, which must be ed25519.PublicKeySize bytes
// (the caller checks). A key that is not a curve point gives a VerifyKey
// that verifies nothing, as crypto/ed25519.Verify does for it.
func NewVerifyKey(pub ed25519.PublicKey) *VerifyKey {
	k := &VerifyKey{}
	copy(k.pub[:], pub)
	if len(pub) != ed25519.PublicKeySize {
		return k
	}
	var a edwards25519.Point
	if _, err := a.SetBytes(pub); err != nil {
		return k
	}
	k.minusA.Negate(&a)
	k.ok = true
	return k
}

// Is reports whether k decodes pub.
func (k *VerifyKey) Is(pub ed25519.PublicKey) bool {
	return k != nil && len(pub) == ed25519.PublicKeySize && bytes.Equal(k.pub[:], pub)
}

// Verify reports whether sig is a valid signature of message by k, as
// crypto/ed25519.Verify(pub, message, sig) would.
func (k *VerifyKey) Verify(message, sig []byte) bool {
	if !k.ok || len(sig) != ed25519.SignatureSize || sig[63]&224 != 0 {
		return false
	}
	h := sha512.New()
	h.Write(sig[:32])
	h.Write(k.pub[:])
	h.Write(message)
	var digest [sha512.Size]byte
	kS, err := edwards25519.NewScalar().SetUniformBytes(h.Sum(digest[:0]))
	if err != nil {
		return false // cannot happen: the digest is 64 bytes
	}
	s, err := edwards25519.NewScalar().SetCanonicalBytes(sig[32:])
	if err != nil {
		return false
	}
	// [S]B = R + [k]A  ⇔  [k](−A) + [S]B = R
	var r edwards25519.Point
	r.VarTimeDoubleScalarBaseMult(kS, &k.minusA, s)
	return bytes.Equal(sig[:32], r.Bytes())
}
