package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
)

func sealedPair(t *testing.T) (*cmb.Record, *Box, *Box, *Box, ed25519.PublicKey) {
	t.Helper()
	sender, _ := GenerateKey(nil)
	recipient, _ := GenerateKey(nil)
	outsider, _ := GenerateKey(nil)
	pub, priv, _ := ed25519.GenerateKey(nil)
	var d cmb.Draft
	d.Fields[cmb.Focus].Text = "the secret plan"
	d.Fields[cmb.Commitment].Text = "tell nobody"
	v := 0.5
	d.Fields[cmb.Mood].Valence = &v
	d.CreatedBy = "0192e4a2-7b5c-7def-8a3b-9c4d5e6f7a8b"
	d.To = "0192e4a2-7b5c-7def-8a3b-000000000001"
	d.Group = "alpha"
	d.CreatedAt = 1751000000000
	r, err := cmb.Build(d, priv)
	if err != nil {
		t.Fatal(err)
	}
	sendBox, _ := NewBox(sender, recipient.PublicKey())
	recvBox, _ := NewBox(recipient, sender.PublicKey())
	outBox, _ := NewBox(outsider, sender.PublicKey())
	return r, sendBox, recvBox, outBox, pub
}

func TestRecordSealOpenRoundTrip(t *testing.T) {
	r, sendBox, recvBox, _, pub := sealedPair(t)
	sealed, err := SealRecord(r, sendBox, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wire := string(sealed.Encode())
	for _, secret := range []string{"secret plan", "tell nobody", "0.5"} {
		if strings.Contains(wire, secret) {
			t.Fatalf("sealed record leaks %q: %s", secret, wire)
		}
	}
	for _, clear := range []string{r.Key, r.Sig, `"group":"alpha"`, `"_e2e":{"nonce":`} {
		if !strings.Contains(wire, clear) {
			t.Fatalf("sealed record lost clear member %q", clear)
		}
	}
	if err := sealed.Verify(cmb.Policy{Audience: cmb.Audience{Group: "alpha", Self: r.To}, AuthorKey: pub}); !errors.Is(err, cmb.ErrSealed) {
		t.Fatalf("verify before open: %v", err)
	}
	received, err := cmb.Decode([]byte(wire))
	if err != nil {
		t.Fatal(err)
	}
	opened, err := OpenRecord(received, recvBox)
	if err != nil {
		t.Fatal(err)
	}
	if err := opened.Verify(cmb.Policy{Audience: cmb.Audience{Group: "alpha", Self: r.To}, AuthorKey: pub}); err != nil {
		t.Fatalf("opened record does not verify: %v", err)
	}
	if string(opened.Encode()) != string(r.Encode()) {
		t.Fatalf("opened record differs from the original\n%s\n%s", opened.Encode(), r.Encode())
	}
}

func TestRecordOpenFailures(t *testing.T) {
	r, sendBox, recvBox, outBox, _ := sealedPair(t)
	sealed, _ := SealRecord(r, sendBox, rand.Reader)
	if _, err := OpenRecord(sealed, outBox); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong key: %v", err)
	}
	tampered := sealed.Clone()
	b := []byte(tampered.Sealed)
	b[3] ^= 'A' ^ 'B'
	if b[3] == sealed.Sealed[3] {
		b[3] = 'Q'
	}
	tampered.Sealed = string(b)
	if _, err := OpenRecord(tampered, recvBox); err == nil {
		t.Fatal("tampered ciphertext opened")
	}
	truncated := sealed.Clone()
	truncated.Sealed = truncated.Sealed[:8]
	if _, err := OpenRecord(truncated, recvBox); err == nil {
		t.Fatal("truncated ciphertext opened")
	}
	// A legacy top-level nonce (§14 A8) is read, and removed once opened.
	legacyForm := sealed.Clone()
	legacyForm.Extra = cmb.Members{{Name: "nonce", Value: []byte(`"` + sealed.E2E.Nonce + `"`)}}
	legacyForm.E2E = nil
	legacy := legacyForm.Encode()
	if strings.Contains(string(legacy), "_e2e") {
		t.Fatal("test did not build the legacy form")
	}
	lr, err := cmb.Decode(legacy)
	if err != nil {
		t.Fatalf("legacy nonce form: %v\n%s", err, legacy)
	}
	opened, err := OpenRecord(lr, recvBox)
	if err != nil {
		t.Fatalf("legacy nonce form: %v", err)
	}
	if _, ok := opened.Extra.Get("nonce"); ok {
		t.Fatal("legacy nonce kept after opening")
	}
	// A ciphertext that authenticates but is not a fields object.
	ct, nonce, _ := sendBox.Seal([]byte(`{"focus":"x"}`), rand.Reader)
	bad := sealed.Clone()
	bad.Sealed, bad.E2E = ct, &cmb.E2E{Nonce: nonce}
	if _, err := OpenRecord(bad, recvBox); !errors.Is(err, cmb.ErrBadRecord) {
		t.Fatalf("garbage plaintext: %v", err)
	}
}
