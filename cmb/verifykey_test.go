package cmb

import (
	"crypto/ed25519"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"filippo.io/edwards25519"
)

// oddKeys are public keys that are not an honest key's: the small-order
// points, non-canonical encodings (y ≥ p, x = 0 with the sign bit set) and
// bytes that decode to no point.
var oddKeys = []string{
	"0100000000000000000000000000000000000000000000000000000000000000",
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"0000000000000000000000000000000000000000000000000000000000000000",
	"0000000000000000000000000000000000000000000000000000000000000080",
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
	"0100000000000000000000000000000000000000000000000000000000000080",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	"0200000000000000000000000000000000000000000000000000000000000000",
}

// sameAsEd25519 fails t unless NewVerifyKey(pub).Verify agrees with
// crypto/ed25519.Verify on (pub, msg, sig).
func sameAsEd25519(t testing.TB, pub, msg, sig []byte) bool {
	t.Helper()
	want := ed25519.Verify(pub, msg, sig)
	if got := NewVerifyKey(pub).Verify(msg, sig); got != want {
		t.Fatalf("VerifyKey.Verify = %v, ed25519.Verify = %v\npub %x\nmsg %x\nsig %x", got, want, pub, msg, sig)
	}
	return want
}

func TestVerifyKeyIsEd25519Verify(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seed := make([]byte, ed25519.SeedSize)
	accepted := 0
	for i := 0; i < 300; i++ {
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		priv := ed25519.NewKeyFromSeed(seed)
		pub := priv.Public().(ed25519.PublicKey)
		msg := make([]byte, rng.IntN(300))
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		sig := ed25519.Sign(priv, msg)
		if sameAsEd25519(t, pub, msg, sig) {
			accepted++
		}
		// One flipped bit anywhere: in the signature, the message, the key.
		s2 := append([]byte(nil), sig...)
		s2[rng.IntN(len(s2))] ^= 1 << rng.IntN(8)
		sameAsEd25519(t, pub, msg, s2)
		if len(msg) > 0 {
			m2 := append([]byte(nil), msg...)
			m2[rng.IntN(len(m2))] ^= 1 << rng.IntN(8)
			sameAsEd25519(t, pub, m2, sig)
		}
		p2 := append(ed25519.PublicKey(nil), pub...)
		p2[rng.IntN(len(p2))] ^= 1 << rng.IntN(8)
		sameAsEd25519(t, p2, msg, sig)
		// S + L: the same scalar, not canonical.
		var s edwards25519.Scalar
		if _, err := s.SetCanonicalBytes(sig[32:]); err != nil {
			t.Fatal(err)
		}
		sameAsEd25519(t, pub, msg, append(sig[:32:32], addL(sig[32:])...))
		// Wrong lengths.
		sameAsEd25519(t, pub, msg, sig[:63])
		sameAsEd25519(t, pub, msg, append(sig[:64:64], 0))
	}
	if accepted != 300 {
		t.Fatalf("%d of 300 honest signatures verified", accepted)
	}
	// The identity key verifies R = [S]B for any message; the other odd
	// keys are checked against the same signatures and random ones.
	var s edwards25519.Scalar
	var wide [64]byte
	for j := range wide {
		wide[j] = byte(rng.Uint32())
	}
	s.SetUniformBytes(wide[:])
	r := new(edwards25519.Point).ScalarBaseMult(&s)
	crafted := append(r.Bytes(), s.Bytes()...)
	identityAccepted := false
	for _, h := range oddKeys {
		pub, _ := hex.DecodeString(h)
		for _, sig := range [][]byte{crafted, make([]byte, 64), append(make([]byte, 32), s.Bytes()...)} {
			for _, msg := range [][]byte{nil, []byte("mmp-sig-v1\n"), make([]byte, 200)} {
				if sameAsEd25519(t, pub, msg, sig) && h == oddKeys[0] {
					identityAccepted = true
				}
			}
		}
		// R given non-canonically (y ≥ p) is refused by both.
		for _, rh := range oddKeys[8:] {
			rb, _ := hex.DecodeString(rh)
			sameAsEd25519(t, pub, []byte("m"), append(rb, make([]byte, 32)...))
		}
	}
	if !identityAccepted {
		t.Fatal("the crafted identity-key signature was not accepted: the edge case is not exercised")
	}
}

// addL returns the 32-byte little-endian s + L, where L is the group order.
func addL(s []byte) []byte {
	l := [32]byte{0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 31: 0x10}
	out := make([]byte, 32)
	carry := 0
	for i := range out {
		v := int(s[i]) + int(l[i]) + carry
		out[i], carry = byte(v), v>>8
	}
	return out
}

func TestVerifyKeyIs(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	k := NewVerifyKey(pub)
	if !k.Is(pub) || k.Is(other) || k.Is(pub[:31]) {
		t.Fatal("Is does not tell its own key from others")
	}
	var nilKey *VerifyKey
	if nilKey.Is(pub) {
		t.Fatal("a nil VerifyKey claims a key")
	}
}

func FuzzVerifyKey(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	msg := []byte("mmp-sig-v1\nkey")
	f.Add([]byte(pub), msg, ed25519.Sign(priv, msg))
	for _, h := range oddKeys {
		k, _ := hex.DecodeString(h)
		f.Add(k, msg, make([]byte, 64))
	}
	f.Fuzz(func(t *testing.T, pub, msg, sig []byte) {
		if len(pub) != ed25519.PublicKeySize {
			return // ed25519.Verify panics; VerifySignature checks the length first
		}
		sameAsEd25519(t, pub, msg, sig)
	})
}
