package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// Point 2 of the trust review: a handshake's key replaces a pin taken from a
// gossiped frame, while two confirmed keys still conflict.
func TestConfirmedKeyReplacesUnconfirmedPin(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	frameKey, realKey, other := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: frameKey, X25519: frameKey}); err != nil {
		t.Fatal(err)
	}
	// Another unconfirmed key is a conflict, as before.
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: other}); !errors.Is(err, ErrKeyConflict) {
		t.Fatalf("second frame key: %v, want a key conflict", err)
	}
	up, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: realKey, X25519: realKey, Confirmed: true})
	if err != nil {
		t.Fatalf("handshake key: %v", err)
	}
	if !up.Changed || !bytes.Equal(up.Replaced, frameKey) || !bytes.Equal(up.Peer.Ed25519, realKey) ||
		!bytes.Equal(up.Peer.X25519, realKey) || !up.Peer.Confirmed {
		t.Fatalf("handshake did not replace the frame pin: %+v", up)
	}
	// Once confirmed, no frame's key displaces it; another handshake's key
	// is recorded as a claimant, a conflict neither key wins.
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: other}); !errors.Is(err, ErrKeyConflict) {
		t.Fatalf("a frame key against a confirmed pin: %v, want a key conflict", err)
	}
	up, err = s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: other, Confirmed: true})
	if err != nil || !up.NewClaimant || !up.Conflicted || !bytes.Equal(up.Peer.Ed25519, realKey) || len(up.Peer.Claimants) != 1 {
		t.Fatalf("a second confirmed key: %+v %v, want a claimant beside the pin", up, err)
	}
	if p, _ := s.GetPeer(ctx, "node-a"); !p.Conflicted() || !p.Claims(other) || !p.Claims(realKey) {
		t.Fatalf("roster after the conflict: %+v", p)
	}
	// The operator's choice ends it, and is not disputed again.
	if _, _, err := s.TrustPeer(ctx, Peer{NodeID: "node-a", Ed25519: other}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.GetPeer(ctx, "node-a"); p.Conflicted() || !p.Trusted || !bytes.Equal(p.Ed25519, other) {
		t.Fatalf("roster after trust: %+v", p)
	}
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: realKey, Confirmed: true}); !errors.Is(err, ErrKeyConflict) {
		t.Fatalf("a handshake key against a trusted pin: %v, want a key conflict", err)
	}
	// The same key confirmed later confirms without replacing.
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-b", Ed25519: frameKey}); err != nil {
		t.Fatal(err)
	}
	up, err = s.PutPeer(ctx, Peer{NodeID: "node-b", Ed25519: frameKey, Confirmed: true})
	if err != nil || up.Replaced != nil || !up.Peer.Confirmed {
		t.Fatalf("confirming the same key: %+v %v", up, err)
	}
}

// Point 12 of the trust review: a sighting that adds nothing writes nothing.
func TestRosterWrittenOnlyOnChange(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	key := bytes.Repeat([]byte{1}, 32)
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: key}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		up, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: key})
		if err != nil || up.Changed {
			t.Fatalf("repeated sighting: %+v %v", up, err)
		}
	}
	after, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := after.Commits - before.Commits; n != 0 {
		t.Fatalf("100 unchanged sightings made %d durable commits, want 0", n)
	}
}

func TestQuarantineKeepsButHides(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := mkEntry("bad", testBase, "forged memo about launch")
	good := mkEntry("good", testBase+1, "honest memo about launch")
	child := mkEntry("kid", testBase+2, "reply")
	child.Parents, child.Ancestors = []string{bad.Key}, []string{bad.Key}
	for _, e := range []Entry{bad, good, child} {
		mustPut(t, s, e)
	}
	n, err := s.Quarantine(ctx, []string{bad.Key, "cmb1-not-stored"})
	if err != nil || n != 1 {
		t.Fatalf("Quarantine: %d %v", n, err)
	}
	if n, err := s.Quarantine(ctx, []string{bad.Key}); err != nil || n != 0 {
		t.Fatalf("second Quarantine: %d %v", n, err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		hits, err := s.Search(ctx, "memo launch", SearchOptions{Limit: 10})
		if err != nil || len(hits) != 1 || hits[0].Key != good.Key {
			t.Fatalf("%s: search found %+v %v, want only the good record", when, hits, err)
		}
		recent, err := s.Recent(ctx, "g1", 10)
		if err != nil || len(recent) != 2 {
			t.Fatalf("%s: recent %+v %v, want the two unquarantined", when, recent, err)
		}
		for _, kt := range recent {
			if kt.Key == bad.Key {
				t.Fatalf("%s: quarantined record listed", when)
			}
		}
		if ok, err := s.Has(ctx, bad.Key); err != nil || !ok {
			t.Fatalf("%s: Has(quarantined) = %v %v, want kept", when, ok, err)
		}
		r, err := s.Get(ctx, bad.Key)
		if err != nil || !r.Meta.Quarantined {
			t.Fatalf("%s: Get(quarantined) = %+v %v", when, r.Meta, err)
		}
		if q := s.Quarantined(); len(q) != 1 || q[0] != bad.Key || !s.IsQuarantined(bad.Key) {
			t.Fatalf("%s: Quarantined() = %v", when, q)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check(s, "after quarantine")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openTest(t, dir), "after reopen")
}

// Point 3 of the trust review: "has signed" is durable.
func TestSignerSetDurable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.HasSigned("agent-x") {
		t.Fatal("fresh store knows a signer")
	}
	if err := s.MarkSigned(ctx, "agent-x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if !s.HasSigned("agent-x") || s.HasSigned("agent-y") {
		t.Fatal("signer set not kept across reopen")
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIsQuarantinedEveryWay: IsQuarantined, which answers without the
// lock while nothing was ever quarantined, names a record quarantined
// when it is put, by Quarantine, and as found at Open, and no longer one
// Unquarantine releases.
func TestIsQuarantinedEveryWay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	held, later, clean := mkEntry("held", testBase), mkEntry("later", testBase+1), mkEntry("clean", testBase+2)
	mustPut(t, s, clean)
	if s.IsQuarantined(clean.Key) || s.IsQuarantined(held.Key) {
		t.Fatal("a record is quarantined before any was")
	}
	if _, _, err := s.Put(ctx, held, Meta{Source: "peer", Quarantined: true}); err != nil {
		t.Fatal(err)
	}
	if !s.IsQuarantined(held.Key) || s.IsQuarantined(clean.Key) {
		t.Fatal("a record put quarantined is not, or another is")
	}
	mustPut(t, s, later)
	if n, err := s.Quarantine(ctx, []string{later.Key}); err != nil || n != 1 {
		t.Fatalf("Quarantine: %d %v", n, err)
	}
	if !s.IsQuarantined(later.Key) {
		t.Fatal("a record Quarantine took is not quarantined")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if !s.IsQuarantined(held.Key) || !s.IsQuarantined(later.Key) || s.IsQuarantined(clean.Key) {
		t.Fatal("after reopen, the quarantined records are not found so")
	}
	if n, err := s.Unquarantine(ctx, []string{held.Key, later.Key}); err != nil || n != 2 {
		t.Fatalf("Unquarantine: %d %v", n, err)
	}
	if s.IsQuarantined(held.Key) || s.IsQuarantined(later.Key) {
		t.Fatal("released records are still quarantined")
	}
}
