package node

import (
	"context"
	"slices"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// TestServedRecordRules pins what a node gives a peer that asks: records of
// its group as held; nothing of another group; a directed record only to
// its recipient, sealed, and only by its author; nothing quarantined. The
// catch-up key listing offers exactly what a fetch would serve.
func TestServedRecordRules(t *testing.T) {
	ctx := context.Background()
	alice, _ := openNode(t, "alice", "alpha")
	bob, bm := openNode(t, "bob", "alpha")
	carol, _ := openNode(t, "carol", "alpha")
	eve, _ := openNode(t, "eve", "beta")
	introduce(t, alice, bob)
	introduce(t, alice, carol)
	bobID, carolID := bob.Identity().NodeID, carol.Identity().NodeID

	plain, err := alice.Remember(ctx, RememberInput{Fields: fields("for the group")})
	if err != nil {
		t.Fatal(err)
	}
	toBob, err := alice.Remember(ctx, RememberInput{Fields: fields("for bob only"), To: bobID})
	if err != nil {
		t.Fatal(err)
	}
	// A record bob directed to alice: she holds it in clear, but is not its author.
	fromBob, err := bob.Remember(ctx, RememberInput{Fields: fields("for alice only"), To: alice.Identity().NodeID})
	if err != nil {
		t.Fatal(err)
	}
	c, err := alice.Check(ctx, bm.published[len(bm.published)-1], source(bob))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Accept(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Another group's record, held however it got here.
	other, err := cmb.Build(cmb.Draft{Fields: fields("beta business"), Group: "beta", CreatedBy: eve.Identity().NodeID, CreatedAt: 1}, eve.Identity().Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.keep(ctx, other, store.Meta{Source: "test", Verified: true}); err != nil {
		t.Fatal(err)
	}
	quarantined, err := alice.Remember(ctx, RememberInput{Fields: fields("admitted under a replaced key")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Store().Quarantine(ctx, []string{quarantined.Key}); err != nil {
		t.Fatal(err)
	}

	serve := func(key, requester string) (ServedRecord, bool) {
		t.Helper()
		sr, ok, err := alice.Serve(ctx, key, requester)
		if err != nil {
			t.Fatalf("serve %s to %s: %v", key, requester, err)
		}
		return sr, ok
	}

	sr, ok := serve(plain.Key, carolID)
	held, err := alice.Get(ctx, plain.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || string(sr.Raw) != string(held.Raw) {
		t.Fatalf("a group record is served as held: ok=%v raw=%s", ok, sr.Raw)
	}
	if sr.AuthorKey != alice.Identity().PublicKeyB64() || sr.AuthorE2E != alice.Identity().E2EPublicKeyDER() {
		t.Fatalf("served with author keys %q %q", sr.AuthorKey, sr.AuthorE2E)
	}

	if _, ok := serve(other.Key, carolID); ok {
		t.Fatal("another group's record was served")
	}
	if _, ok := serve(quarantined.Key, carolID); ok {
		t.Fatal("a quarantined record was served")
	}
	if has, err := alice.Has(ctx, quarantined.Key); err != nil || !has {
		t.Fatalf("a quarantined record is still held (so never fetched again): %v %v", has, err)
	}
	if _, ok := serve("cmb1-not-held", carolID); ok {
		t.Fatal("a record not held was served")
	}

	if _, ok := serve(toBob.Key, carolID); ok {
		t.Fatal("a directed record was served to someone other than its recipient")
	}
	sr, ok = serve(toBob.Key, bobID)
	if !ok {
		t.Fatal("a directed record was not served to its recipient")
	}
	rec, err := cmb.Decode(sr.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.IsSealed() {
		t.Fatalf("a directed record was served in clear: %s", sr.Raw)
	}
	c, err = bob.Check(ctx, rec, Source{NodeID: alice.Identity().NodeID, AuthorKey: sr.AuthorKey, AuthorE2E: sr.AuthorE2E, Via: "test"})
	if err != nil || !c.Decrypted || c.Record.Key != toBob.Key {
		t.Fatalf("bob opens the served record: %v", err)
	}

	for _, requester := range []string{bobID, carolID} {
		if _, ok := serve(fromBob.Key, requester); ok {
			t.Fatalf("a directed record this node did not author was served to %s", requester)
		}
	}
	// Held in clear and directed to bob, but by carol: only its author seals it for bob.
	carolToBob, err := cmb.Build(cmb.Draft{Fields: fields("carol to bob"), Group: "alpha", To: bobID, CreatedBy: carolID, CreatedAt: 2}, carol.Identity().Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.keep(ctx, carolToBob, store.Meta{Source: "test", Verified: true, Directed: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := serve(carolToBob.Key, bobID); ok {
		t.Fatal("a directed record another node authored was served to its recipient")
	}

	listed := func(requester string) []string {
		t.Helper()
		var keys []string
		if err := alice.ScanServable(ctx, requester, 0, 0, func(key string, _ int64) error {
			keys = append(keys, key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		return keys
	}
	for requester, want := range map[string][]string{
		bobID:   {plain.Key, toBob.Key},
		carolID: {plain.Key},
	} {
		slices.Sort(want)
		if got := listed(requester); !slices.Equal(got, want) {
			t.Errorf("keys listed for %s: %v, want %v", requester, got, want)
		}
	}
}
