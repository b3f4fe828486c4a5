package groupkey

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ring(t *testing.T, g Group, grace time.Duration, now func() time.Time) *Keyring {
	t.Helper()
	k, err := New(g, Options{Grace: grace, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newGroup(t *testing.T, name string) Group {
	t.Helper()
	g, err := NewGroup(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A proof verifies only for the transcript it was made for: the same
// group and epoch, the same prover and verifier in the same roles, the
// same two nonces, untruncated and untampered.
func TestProof(t *testing.T) {
	g := newGroup(t, "alpha")
	k := ring(t, g, 0, nil)
	a, b := []byte("peer-a"), []byte("peer-b")
	na, nb := bytes.Repeat([]byte{1}, NonceSize), bytes.Repeat([]byte{2}, NonceSize)
	p, err := k.Prove(1, a, b, na, nb)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(1, a, b, na, nb, p); err != nil {
		t.Fatalf("honest proof refused: %v", err)
	}
	other := ring(t, newGroup(t, "alpha"), 0, nil) // same name, another group
	sameID := g
	sameID.Epochs = []Epoch{{N: 1, Created: time.Now()}} // same id, wrong secret
	wrongSecret := ring(t, sameID, 0, nil)
	tampered := bytes.Clone(p)
	tampered[7] ^= 0x40
	n3 := bytes.Repeat([]byte{3}, NonceSize)
	for _, c := range []struct {
		name string
		k    *Keyring
		ep   uint32
		prov []byte
		ver  []byte
		pn   []byte
		vn   []byte
		p    []byte
		want error
	}{
		{"tampered", k, 1, a, b, na, nb, tampered, ErrBadProof},
		{"truncated", k, 1, a, b, na, nb, p[:16], ErrBadProof},
		{"empty", k, 1, a, b, na, nb, nil, ErrBadProof},
		{"replayed with a fresh verifier nonce", k, 1, a, b, na, n3, p, ErrBadProof},
		{"replayed with another prover nonce", k, 1, a, b, n3, nb, p, ErrBadProof},
		{"reflected (roles swapped)", k, 1, b, a, nb, na, p, ErrBadProof},
		{"to another verifier", k, 1, a, []byte("peer-c"), na, nb, p, ErrBadProof},
		{"another group of the same name", other, 1, a, b, na, nb, p, ErrBadProof},
		{"same id, wrong secret", wrongSecret, 1, a, b, na, nb, p, ErrBadProof},
		{"an epoch not held", k, 2, a, b, na, nb, p, ErrUnknownEpoch},
	} {
		if err := c.k.Verify(c.ep, c.prov, c.ver, c.pn, c.vn, c.p); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

// After a rotation the old epoch is accepted for the grace period, then
// refused; the newest epoch always is.
func TestRotationGrace(t *testing.T) {
	g := newGroup(t, "alpha")
	now := time.Now()
	clock := func() time.Time { return now }
	k := ring(t, g, time.Hour, clock)
	e2 := Epoch{N: 2, Created: now, Secret: Secret{9}}
	if err := k.AddEpochs(e2); err != nil {
		t.Fatal(err)
	}
	if k.Current() != 2 {
		t.Fatalf("current %d, want 2", k.Current())
	}
	if err := k.Accepts(1); err != nil {
		t.Fatalf("old epoch refused within the grace: %v", err)
	}
	now = now.Add(61 * time.Minute)
	if err := k.Accepts(1); !errors.Is(err, ErrEpochExpired) {
		t.Fatalf("old epoch after the grace: %v, want ErrEpochExpired", err)
	}
	if err := k.Accepts(2); err != nil {
		t.Fatalf("current epoch refused: %v", err)
	}
	env, err := k.SealEpoch(1, KindGossip, "", []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.Open(KindGossip, "", env); !errors.Is(err, ErrEpochExpired) {
		t.Fatalf("an expired epoch's envelope opened: %v", err)
	}
	if err := k.AddEpochs(Epoch{N: 2, Secret: Secret{8}, Created: now}); !errors.Is(err, ErrOtherGroup) {
		t.Fatalf("a second secret for epoch 2: %v, want ErrOtherGroup", err)
	}
}

// An envelope opens only as what it was sealed as: same group, kind,
// record key, untampered, untruncated.
func TestEnvelope(t *testing.T) {
	g := newGroup(t, "alpha")
	k := ring(t, g, 0, nil)
	plain := []byte(`{"type":"cmb","cmb":{"fields":"secret focus"}}`)
	env, err := k.Seal(KindRecord, "cmb1-abc", plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != len(plain)+Overhead || bytes.Contains(env, []byte("secret focus")) {
		t.Fatalf("envelope of %d bytes for %d, or plaintext visible", len(env), len(plain))
	}
	got, ep, err := k.Open(KindRecord, "cmb1-abc", env)
	if err != nil || ep != 1 || !bytes.Equal(got, plain) {
		t.Fatalf("open: %q %d %v", got, ep, err)
	}
	again, _ := k.Seal(KindRecord, "cmb1-abc", plain)
	if bytes.Equal(again, env) {
		t.Error("two seals of one plaintext are identical: the nonce is not random")
	}
	other := ring(t, newGroup(t, "alpha"), 0, nil)
	flip := func(i int) []byte { b := bytes.Clone(env); b[i] ^= 1; return b }
	for _, c := range []struct {
		name string
		k    *Keyring
		kind byte
		key  string
		env  []byte
		want error
	}{
		{"another group", other, KindRecord, "cmb1-abc", env, ErrBadEnvelope},
		{"another record key", k, KindRecord, "cmb1-abd", env, ErrBadEnvelope},
		{"another kind", k, KindGossip, "cmb1-abc", env, ErrBadEnvelope},
		{"ciphertext tampered", k, KindRecord, "cmb1-abc", flip(len(env) - 20), ErrBadEnvelope},
		{"nonce tampered", k, KindRecord, "cmb1-abc", flip(12), ErrBadEnvelope},
		{"magic tampered", k, KindRecord, "cmb1-abc", flip(0), ErrBadEnvelope},
		{"epoch tampered", k, KindRecord, "cmb1-abc", flip(9), ErrUnknownEpoch},
		{"truncated", k, KindRecord, "cmb1-abc", env[:len(env)-1], ErrBadEnvelope},
		{"header only", k, KindRecord, "cmb1-abc", env[:20], ErrBadEnvelope},
		{"plaintext", k, KindRecord, "cmb1-abc", plain, ErrBadEnvelope},
	} {
		if _, _, err := c.k.Open(c.kind, c.key, c.env); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if Tag(g.ID) == Tag(other.ID()) || !strings.HasPrefix(Tag(g.ID), "p-") || len(Tag(g.ID)) != 26 {
		t.Errorf("tags %s %s", Tag(g.ID), Tag(other.ID()))
	}
}

// Create, Rotate, Join and Reload keep one file per epoch, private, and
// refuse to mix two groups of one name.
func TestFiles(t *testing.T) {
	home := t.TempDir()
	if _, err := LoadGroup(home, "alpha"); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("empty home: %v", err)
	}
	g, err := Create(home, "alpha", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(home, "alpha", time.Now()); !errors.Is(err, ErrOtherGroup) {
		t.Fatalf("second create: %v", err)
	}
	fi, err := os.Stat(filepath.Join(Dir(home, "alpha"), "1.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	if di, err := os.Stat(Dir(home, "alpha")); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("secret directory: %v %v", di, err)
	}
	// The secret is 32 random bytes: another group, or the same name
	// created in another home, never gets the same secret or id.
	again, err := Create(t.TempDir(), "alpha", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := g.Epochs[0].Secret, again.Epochs[0].Secret
	if len(s1) != 32 || s1 == s2 || s1 == (Secret{}) || g.ID == again.ID || bytes.Count(s1[:], s1[:1]) == 32 {
		t.Fatalf("secrets %x and %x, ids %x and %x: not 32 independent random bytes", s1, s2, g.ID, again.ID)
	}
	k, err := Load(home, "alpha", Options{Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_, e2, err := Rotate(home, "alpha", time.Now())
	if err != nil || e2.N != 2 {
		t.Fatalf("rotate: %v %v", e2.N, err)
	}
	added, err := k.Reload()
	if err != nil || len(added) != 1 || added[0] != 2 || k.Current() != 2 {
		t.Fatalf("reload: %v %v current %d", added, err, k.Current())
	}

	// Another home joins with epoch 2, then sees a join of another group.
	other := t.TempDir()
	if ok, err := Join(other, "alpha", g.ID, e2, false); !ok || err != nil {
		t.Fatalf("join: %v %v", ok, err)
	}
	if ok, err := Join(other, "alpha", g.ID, e2, false); ok || err != nil {
		t.Fatalf("join again: %v %v, want a no-op", ok, err)
	}
	stranger := newGroup(t, "alpha")
	if _, err := Join(other, "alpha", stranger.ID, stranger.Epochs[0], false); !errors.Is(err, ErrOtherGroup) {
		t.Fatalf("join of another group of the same name: %v", err)
	}
	if ok, err := Join(other, "alpha", stranger.ID, stranger.Epochs[0], true); !ok || err != nil {
		t.Fatalf("join with replace: %v %v", ok, err)
	}
	got, err := LoadGroup(other, "alpha")
	if err != nil || got.ID != stranger.ID {
		t.Fatalf("after replace: %v", err)
	}

	// A secret file others can read is refused.
	if err := os.Chmod(filepath.Join(Dir(home, "alpha"), "1.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadGroup(home, "alpha"); err == nil || !strings.Contains(err.Error(), "open to group or others") {
		t.Fatalf("world-readable secret: %v", err)
	}
}

func TestInvite(t *testing.T) {
	g := newGroup(t, "alpha")
	inv := Invite{Group: "alpha", ID: g.ID, Epoch: g.Epochs[0], Addrs: []string{"/ip4/192.0.2.1/tcp/4001/p2p/12D3KooWabc"}}
	line := inv.String()
	if strings.ContainsAny(line, " \n") {
		t.Fatalf("invite is not one line: %q", line)
	}
	got, err := ParseInvite(" "+line+"\n", time.Now())
	if err != nil || got.ID != g.ID || got.Epoch.Secret != g.Epochs[0].Secret || got.Epoch.N != 1 || len(got.Addrs) != 1 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if err := got.ForGroup("beta"); !errors.Is(err, ErrInviteGroup) {
		t.Errorf("another group: %v", err)
	}
	if got.InviterNodeID != "" || got.InviterKey != nil {
		t.Errorf("an invite without an inviter parsed with one: %+v", got)
	}
	// The inviter's nodeId and key travel with it, both or neither.
	withInviter := inv
	withInviter.InviterNodeID, withInviter.InviterKey = "0190F5C2-1a2b-7c3d-8e4f-5a6b7c8d9e0f", bytes.Repeat([]byte{7}, 32)
	got, err = ParseInvite(withInviter.String(), time.Now())
	if err != nil || got.InviterNodeID != "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f" || !bytes.Equal(got.InviterKey, withInviter.InviterKey) {
		t.Fatalf("inviter round trip: %+v %v", got, err)
	}
	halfInviter, _ := json.Marshal(map[string]any{"g": "alpha", "i": strings.Repeat("ab", IDSize), "e": 1, "c": 1,
		"s": base64.RawURLEncoding.EncodeToString(make([]byte, SecretSize)), "n": "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f"})
	shortKey, _ := json.Marshal(map[string]any{"g": "alpha", "i": strings.Repeat("ab", IDSize), "e": 1, "c": 1,
		"s": base64.RawURLEncoding.EncodeToString(make([]byte, SecretSize)), "n": "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f", "k": "AAAA"})
	inv.Expires = time.Now().Add(-time.Minute)
	expired := inv.String()
	swapped := []byte(line)
	i := len(invitePrefix) + 20
	swapped[i] ^= 1
	// A payload with a correct checksum but an unknown member.
	odd, _ := json.Marshal(map[string]any{"g": "alpha", "zz": 1})
	for _, c := range []struct {
		name, s string
		want    error
	}{
		{"expired", expired, ErrInviteExpired},
		{"a character changed", string(swapped), ErrInviteGarbled},
		{"truncated", line[:len(line)-5], ErrInviteGarbled},
		{"no prefix", strings.TrimPrefix(line, invitePrefix), ErrInviteGarbled},
		{"not base64", invitePrefix + "!!!!", ErrInviteGarbled},
		{"empty", "", ErrInviteGarbled},
		{"unknown member", withSum(odd), ErrInviteGarbled},
		{"inviter without key", withSum(halfInviter), ErrInviteGarbled},
		{"inviter key too short", withSum(shortKey), ErrInviteGarbled},
	} {
		_, err := ParseInvite(c.s, time.Now())
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "invite is ") {
			t.Errorf("%s: message %q is not one line naming the invite", c.name, msg)
		}
	}
}

func withSum(payload []byte) string { return invitePrefix + encodeWithSum(payload) }

// Sealing and opening one gossip message of a typical 1 KiB cmb frame.
func BenchmarkSealOpen1KB(b *testing.B) {
	g, _ := NewGroup("bench", time.Now())
	k, _ := New(g, Options{})
	plain := bytes.Repeat([]byte("x"), 1024)
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		env, err := k.Seal(KindGossip, "", plain)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := k.Open(KindGossip, "", env); err != nil {
			b.Fatal(err)
		}
	}
}
