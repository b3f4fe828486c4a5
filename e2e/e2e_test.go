package e2e_test

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/e2e"
)

// knownAnswer mirrors fixtures/e2e/known-answer.json, produced by
// fixtures/e2e/gen.py with pyca/cryptography rather than Go.
type knownAnswer struct {
	Alice, Bob struct {
		PrivateRaw, PrivatePKCS8, PublicRaw, PublicDER string
	}
	SharedHex  string
	Nonce      string
	Plaintext  string
	Ciphertext string
}

func loadKnownAnswer(t *testing.T) knownAnswer {
	t.Helper()
	b, err := os.ReadFile("../fixtures/e2e/known-answer.json")
	if err != nil {
		t.Fatal(err)
	}
	var ka knownAnswer
	if err := json.Unmarshal(b, &ka); err != nil {
		t.Fatal(err)
	}
	return ka
}

func mustPriv(t testing.TB, s string) *ecdh.PrivateKey {
	t.Helper()
	k, err := e2e.ParsePrivateKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustPub(t testing.TB, s string) *ecdh.PublicKey {
	t.Helper()
	k, err := e2e.ParsePublicKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustGen(t testing.TB) *ecdh.PrivateKey {
	t.Helper()
	k, err := e2e.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKnownAnswer(t *testing.T) {
	ka := loadKnownAnswer(t)
	alice := mustPriv(t, ka.Alice.PrivateRaw)
	bob := mustPriv(t, ka.Bob.PrivatePKCS8)
	alicePub := mustPub(t, ka.Alice.PublicDER)
	bobPub := mustPub(t, ka.Bob.PublicRaw)

	if !alice.PublicKey().Equal(alicePub) || !bob.PublicKey().Equal(bobPub) {
		t.Fatal("fixture public keys do not match the private keys")
	}
	shared, err := alice.ECDH(bobPub)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(shared); got != ka.SharedHex {
		t.Fatalf("shared secret %s, want %s (RFC 7748 §6.1)", got, ka.SharedHex)
	}

	nonce, err := base64.StdEncoding.DecodeString(ka.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := e2e.SealWithNonce([]byte(ka.Plaintext), alice, bobPub, nonce)
	if err != nil {
		t.Fatal(err)
	}
	if ct != ka.Ciphertext {
		t.Errorf("ciphertext\n got %s\nwant %s", ct, ka.Ciphertext)
	}
	pt, err := e2e.Open(ka.Ciphertext, ka.Nonce, bob, alicePub)
	if err != nil {
		t.Fatal(err)
	}
	if string(pt) != ka.Plaintext {
		t.Errorf("opened %q, want %q", pt, ka.Plaintext)
	}

	// Our encoders must reproduce the independent encodings byte for byte.
	for _, c := range []struct{ name, got, want string }{
		{"alice public DER", e2e.EncodePublicKeyDER(alicePub), ka.Alice.PublicDER},
		{"alice public raw", e2e.EncodePublicKeyRaw(alicePub), ka.Alice.PublicRaw},
		{"alice private raw", e2e.EncodePrivateKeyRaw(alice), ka.Alice.PrivateRaw},
		{"alice private PKCS8", e2e.EncodePrivateKeyPKCS8(alice), ka.Alice.PrivatePKCS8},
		{"bob public DER", e2e.EncodePublicKeyDER(bobPub), ka.Bob.PublicDER},
		{"bob private PKCS8", e2e.EncodePrivateKeyPKCS8(bob), ka.Bob.PrivatePKCS8},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, c.got, c.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	alice, bob := mustGen(t), mustGen(t)
	for _, tc := range []struct {
		name      string
		plaintext []byte
	}{
		{"empty", []byte{}},
		{"fields json", []byte(`{"focus":"x","mood":{"text":"ok","valence":0.1,"arousal":0}}`)},
		{"unicode", []byte(`{"focus":"naïve café — 日本語 🚀"}`)},
		{"1 KiB", bytes.Repeat([]byte("a"), 1024)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, nonce, err := e2e.Seal(tc.plaintext, alice, bob.PublicKey(), nil)
			if err != nil {
				t.Fatal(err)
			}
			// The recipient uses its own private key and the sender's public key.
			got, err := e2e.Open(ct, nonce, bob, alice.PublicKey())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.plaintext) {
				t.Fatalf("opened %q, want %q", got, tc.plaintext)
			}
			raw, err := base64.StdEncoding.Strict().DecodeString(ct)
			if err != nil {
				t.Fatalf("ciphertext is not standard padded base64: %v", err)
			}
			if len(raw) != len(tc.plaintext)+e2e.TagSize {
				t.Errorf("ciphertext is %d bytes, want plaintext+%d", len(raw), e2e.TagSize)
			}
		})
	}
}

func TestSealUsesFreshNonceFromReader(t *testing.T) {
	alice, bob := mustGen(t), mustGen(t)
	fixed := bytes.Repeat([]byte{7}, e2e.NonceSize)
	_, nonce, err := e2e.Seal([]byte("x"), alice, bob.PublicKey(), bytes.NewReader(fixed))
	if err != nil {
		t.Fatal(err)
	}
	if nonce != base64.StdEncoding.EncodeToString(fixed) {
		t.Errorf("nonce %s was not read from the supplied reader", nonce)
	}
	if _, _, err := e2e.Seal([]byte("x"), alice, bob.PublicKey(), bytes.NewReader(fixed[:5])); err == nil {
		t.Error("Seal succeeded with a reader that ran out of bytes")
	}
	c1, n1, _ := e2e.Seal([]byte("same"), alice, bob.PublicKey(), nil)
	c2, n2, _ := e2e.Seal([]byte("same"), alice, bob.PublicKey(), nil)
	if n1 == n2 || c1 == c2 {
		t.Error("two seals of the same plaintext share a nonce or ciphertext")
	}
}

// flip returns s (standard base64) with one bit of byte i changed; a negative i counts from the end.
func flip(t *testing.T, s string, i int) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	if i < 0 {
		i += len(b)
	}
	b[i] ^= 0x01
	return base64.StdEncoding.EncodeToString(b)
}

func TestOpenRejects(t *testing.T) {
	alice, bob, eve := mustGen(t), mustGen(t), mustGen(t)
	ct, nonce, err := e2e.Seal([]byte(`{"focus":"secret"}`), alice, bob.PublicKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(ct)

	for _, tc := range []struct {
		name      string
		ct, nonce string
		own       *ecdh.PrivateKey
		sender    *ecdh.PublicKey
		want      error
	}{
		{"ciphertext body bit flipped", flip(t, ct, 0), nonce, bob, alice.PublicKey(), e2e.ErrAuth},
		{"tag bit flipped", flip(t, ct, -1), nonce, bob, alice.PublicKey(), e2e.ErrAuth},
		{"nonce bit flipped", ct, flip(t, nonce, 3), bob, alice.PublicKey(), e2e.ErrAuth},
		{"wrong recipient key", ct, nonce, eve, alice.PublicKey(), e2e.ErrAuth},
		{"wrong sender key", ct, nonce, bob, eve.PublicKey(), e2e.ErrAuth},
		{"ciphertext cut short", base64.StdEncoding.EncodeToString(raw[:len(raw)-1]), nonce, bob, alice.PublicKey(), e2e.ErrAuth},
		{"shorter than tag", base64.StdEncoding.EncodeToString(raw[:e2e.TagSize-1]), nonce, bob, alice.PublicKey(), e2e.ErrTruncated},
		{"empty ciphertext", "", nonce, bob, alice.PublicKey(), e2e.ErrTruncated},
		{"garbage ciphertext", "not*base64!", nonce, bob, alice.PublicKey(), e2e.ErrEncoding},
		{"mixed alphabets", "ab+c-d__", nonce, bob, alice.PublicKey(), e2e.ErrEncoding},
		{"garbage nonce", ct, "%%%", bob, alice.PublicKey(), e2e.ErrEncoding},
		{"8-byte nonce", ct, base64.StdEncoding.EncodeToString(make([]byte, 8)), bob, alice.PublicKey(), e2e.ErrNonceSize},
		{"24-byte nonce", ct, base64.StdEncoding.EncodeToString(make([]byte, 24)), bob, alice.PublicKey(), e2e.ErrNonceSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt, err := e2e.Open(tc.ct, tc.nonce, tc.own, tc.sender)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got (%q, %v), want error %v", pt, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "e2e open: ") {
				t.Errorf("error %q does not say what was being done", err)
			}
		})
	}
}

func TestOpenAcceptsLenientBase64(t *testing.T) {
	alice, bob := mustGen(t), mustGen(t)
	plaintext := bytes.Repeat([]byte{0xfb, 0xff}, 40) // forces + and / in std base64
	ct, nonce, err := e2e.Seal(plaintext, alice, bob.PublicKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(ct)
	n, _ := base64.StdEncoding.DecodeString(nonce)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		got, err := e2e.Open(enc.EncodeToString(raw), enc.EncodeToString(n), bob, alice.PublicKey())
		if err != nil || !bytes.Equal(got, plaintext) {
			t.Errorf("open with %v: %v", enc, err)
		}
	}
}

func TestLowOrderPeerKeyRejected(t *testing.T) {
	own := mustGen(t)
	one := make([]byte, 32)
	one[0] = 1 // u = 1 has order 4: X25519 with it yields all zeros
	for _, tc := range []struct {
		name string
		pub  []byte
	}{
		{"zero", make([]byte, 32)},
		{"one", one},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := ecdh.X25519().NewPublicKey(tc.pub)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := e2e.Seal([]byte("x"), own, pub, nil); !errors.Is(err, e2e.ErrLowOrder) {
				t.Errorf("Seal: got %v, want ErrLowOrder", err)
			}
			if _, err := e2e.Open("AAAAAAAAAAAAAAAAAAAAAA==", "AAAAAAAAAAAAAAAA", own, pub); !errors.Is(err, e2e.ErrLowOrder) {
				t.Errorf("Open: got %v, want ErrLowOrder", err)
			}
		})
	}
}

func TestNonX25519KeysRejected(t *testing.T) {
	p256, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	x := mustGen(t)
	if _, err := e2e.NewBox(x, p256.PublicKey()); !errors.Is(err, e2e.ErrKey) {
		t.Errorf("X25519 own + P-256 peer: got %v, want ErrKey", err)
	}
	if _, err := e2e.NewBox(nil, x.PublicKey()); !errors.Is(err, e2e.ErrKey) {
		t.Errorf("nil own key: got %v, want ErrKey", err)
	}
}

func TestParsePublicKeyForms(t *testing.T) {
	k := mustGen(t).PublicKey()
	raw := k.Bytes()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, in string }{
		{"raw url unpadded", base64.RawURLEncoding.EncodeToString(raw)},
		{"raw url padded", base64.URLEncoding.EncodeToString(raw)},
		{"raw std padded", base64.StdEncoding.EncodeToString(raw)},
		{"DER std padded", base64.StdEncoding.EncodeToString(der)},
		{"DER std unpadded", base64.RawStdEncoding.EncodeToString(der)},
		{"DER url", base64.RawURLEncoding.EncodeToString(der)},
		{"DER with trailing newline", base64.StdEncoding.EncodeToString(der) + "\n"},
		{"our DER encoder", e2e.EncodePublicKeyDER(k)},
		{"our raw encoder", e2e.EncodePublicKeyRaw(k)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e2e.ParsePublicKey(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(k) {
				t.Fatal("parsed a different key")
			}
		})
	}
}

func TestParsePublicKeyRejects(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(nil)
	edDER, _ := x509.MarshalPKIXPublicKey(edPub)
	p256, _ := ecdh.P256().GenerateKey(rand.Reader)
	p256DER, _ := x509.MarshalPKIXPublicKey(p256.PublicKey())
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"31 bytes", base64.RawURLEncoding.EncodeToString(make([]byte, 31))},
		{"33 bytes", base64.RawURLEncoding.EncodeToString(make([]byte, 33))},
		{"not base64", "hello world!"},
		{"three padding chars", base64.RawURLEncoding.EncodeToString(make([]byte, 32)) + "==="},
		{"Ed25519 SPKI", base64.StdEncoding.EncodeToString(edDER)},
		{"P-256 SPKI", base64.StdEncoding.EncodeToString(p256DER)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k, err := e2e.ParsePublicKey(tc.in); !errors.Is(err, e2e.ErrKey) {
				t.Fatalf("got (%v, %v), want ErrKey", k, err)
			}
		})
	}
}

func TestParsePrivateKeyForms(t *testing.T) {
	k := mustGen(t)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkcs8) != 48 {
		t.Errorf("PKCS#8 is %d bytes, the reference runtime writes 48", len(pkcs8))
	}
	for _, tc := range []struct{ name, in string }{
		{"raw url unpadded", base64.RawURLEncoding.EncodeToString(k.Bytes())},
		{"raw std padded", base64.StdEncoding.EncodeToString(k.Bytes())},
		{"PKCS8 std padded", base64.StdEncoding.EncodeToString(pkcs8)},
		{"PKCS8 url unpadded", base64.RawURLEncoding.EncodeToString(pkcs8)},
		{"our raw encoder", e2e.EncodePrivateKeyRaw(k)},
		{"our PKCS8 encoder", e2e.EncodePrivateKeyPKCS8(k)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e2e.ParsePrivateKey(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(k) {
				t.Fatal("parsed a different key")
			}
		})
	}

	_, edPriv, _ := ed25519.GenerateKey(nil)
	edDER, _ := x509.MarshalPKCS8PrivateKey(edPriv)
	for _, tc := range []struct{ name, in string }{
		{"Ed25519 PKCS8", base64.StdEncoding.EncodeToString(edDER)},
		{"16 bytes", base64.RawURLEncoding.EncodeToString(make([]byte, 16))},
		{"garbage", "***"},
	} {
		t.Run("reject "+tc.name, func(t *testing.T) {
			if _, err := e2e.ParsePrivateKey(tc.in); !errors.Is(err, e2e.ErrKey) {
				t.Fatalf("got %v, want ErrKey", err)
			}
		})
	}
}

func TestEncodePublicKeyDER(t *testing.T) {
	for range 5 {
		k := mustGen(t).PublicKey()
		s := e2e.EncodePublicKeyDER(k)
		if !strings.HasPrefix(s, "MCowBQYDK2VuAyEA") {
			t.Fatalf("DER %s lacks the X25519 SPKI prefix", s)
		}
		der, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		want := append(mustHex(t, "302a300506032b656e032100"), k.Bytes()...)
		if !bytes.Equal(der, want) {
			t.Fatalf("DER %x, want %x", der, want)
		}
	}
}

func TestGenerateKeyUsesReader(t *testing.T) {
	seed := bytes.Repeat([]byte{0x42}, 32)
	k, err := e2e.GenerateKey(bytes.NewReader(seed))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.Bytes(), seed) {
		t.Error("key was not taken from the supplied reader")
	}
	if _, err := e2e.GenerateKey(bytes.NewReader(seed[:10])); err == nil {
		t.Error("GenerateKey succeeded with a short reader")
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func benchKeys(b *testing.B) (alice, bob *ecdh.PrivateKey, plaintext []byte) {
	alice, bob = mustGen(b), mustGen(b)
	plaintext = bytes.Repeat([]byte(`{"focus":"benchmark"}`), 1024/21+1)[:1024]
	return alice, bob, plaintext
}

// BenchmarkSeal and BenchmarkOpen include the X25519 agreement, as the
// one-shot functions do; the Box variants show the per-record cost once the
// per-peer key is cached.
func BenchmarkSeal(b *testing.B) {
	alice, bob, pt := benchKeys(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		if _, _, err := e2e.Seal(pt, alice, bob.PublicKey(), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	alice, bob, pt := benchKeys(b)
	ct, nonce, err := e2e.Seal(pt, alice, bob.PublicKey(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		if _, err := e2e.Open(ct, nonce, bob, alice.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBoxSeal(b *testing.B) {
	alice, bob, pt := benchKeys(b)
	box, err := e2e.NewBox(alice, bob.PublicKey())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		if _, _, err := box.Seal(pt, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBoxOpen(b *testing.B) {
	alice, bob, pt := benchKeys(b)
	ct, nonce, err := e2e.Seal(pt, alice, bob.PublicKey(), nil)
	if err != nil {
		b.Fatal(err)
	}
	box, err := e2e.NewBox(bob, alice.PublicKey())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		if _, err := box.Open(ct, nonce); err != nil {
			b.Fatal(err)
		}
	}
}
