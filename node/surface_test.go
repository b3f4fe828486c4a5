package node

import (
	"context"
	"testing"

	"github.com/cmbnode/cmbnode/node/svaf"
)

// TestThreadOmitsHiddenMembers: a thread leaves out a member the surface
// policy hides (a redundant near-copy) but walks through it, so the reply
// to the copy is still in the thread; asked for by key, the hidden record
// is the focal record of its own thread.
func TestThreadOmitsHiddenMembers(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	first := "The parser release ships on Friday after the code freeze"
	root, err := alice.Remember(ctx, RememberInput{Fields: fields(first)})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := alice.Remember(ctx, RememberInput{Fields: fields(first + "."), Parents: []string{root.Key}})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := alice.Remember(ctx, RememberInput{Fields: fields("then the docs team writes the changelog"), Parents: []string{dup.Key}})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, bob, alice, am.published)
	if !bob.Hidden(dup.Key) {
		v, _ := bob.VerdictOf(dup.Key)
		t.Fatalf("the near-copy is not hidden: %+v", v)
	}
	members := func(key string) map[string]string {
		t.Helper()
		th, err := bob.Thread(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range th {
			out[m.Key] = m.Role
		}
		return out
	}
	if got := members(root.Key); len(got) != 2 || got[root.Key] != RoleFocal || got[reply.Key] != RoleDescendant {
		t.Fatalf("thread of the root: %v, want the root and the reply, not the hidden copy", got)
	}
	if got := members(dup.Key); len(got) != 3 || got[dup.Key] != RoleFocal {
		t.Fatalf("thread of the hidden copy, asked for by key: %v, want it as the focal record with both neighbours", got)
	}
	// Surfacing every verdict shows it in the thread again.
	all := openWith(t, "carol", Options{SVAF: SVAFOptions{Surface: []svaf.Decision{svaf.Aligned, svaf.Guarded, svaf.Redundant, svaf.Rejected}}})
	introduce(t, alice, all)
	receive(t, all, alice, am.published)
	th, err := all.Thread(ctx, root.Key, 0)
	if err != nil || len(th) != 3 {
		t.Fatalf("thread with every verdict surfaced: %+v %v, want 3 members", th, err)
	}
}

// TestPossessivesAreStripped: "Melanie's" and "Melanie" are one term,
// whichever of them the record or the query holds.
func TestPossessivesAreStripped(t *testing.T) {
	ctx := context.Background()
	n, _ := openNode(t, "alice", "alpha")
	plain, err := n.Remember(ctx, RememberInput{Fields: fields("Melanie painted a lake at sunrise")})
	if err != nil {
		t.Fatal(err)
	}
	poss, err := n.Remember(ctx, RememberInput{Fields: fields("Jonah's bicycle has a flat tyre")})
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{"Melanie's": plain.Key, "Jonah": poss.Key, "jonah’s": poss.Key} {
		hits, err := n.Recall(ctx, q, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 1 || hits[0].Key != want {
			t.Fatalf("recall %q: %+v, want only %s", q, hits, want)
		}
	}
}

// TestDirectedNearCopySurfaced: a record directed to this node is surfaced
// by recall even when it is a near-copy SVAF would call redundant, while
// the broadcast copy is hidden.
func TestDirectedNearCopySurfaced(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	first := "The kiln fires at dawn for the stoneware glaze"
	for _, in := range []RememberInput{{Fields: fields(first)}, {Fields: fields(first + ".")}, {Fields: fields(first + "!"), To: bob.Identity().NodeID}} {
		if _, err := alice.Remember(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	anchor, copyKey, directed := am.published[0].Key, am.published[1].Key, am.published[2].Key
	if !bob.Hidden(copyKey) {
		t.Fatal("the broadcast near-copy is not hidden")
	}
	hits, err := bob.Recall(ctx, "kiln stoneware glaze", 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, h := range hits {
		got[h.Key] = true
	}
	if !got[anchor] || !got[directed] || got[copyKey] {
		t.Fatalf("recall: %v, want the anchor and the directed near-copy, not the broadcast one", got)
	}
}

// TestRejectedRecordKept: a record SVAF rejects is stored with its verdict
// and Get returns it; under MMP §9.4's strict surface it is not recalled.
func TestRejectedRecordKept(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	cfg := svaf.Default()
	cfg.Aligned, cfg.Guarded = 0.0001, 0.0002 // any drift at all rejects
	bob := openWith(t, "bob", Options{SVAF: SVAFOptions{Config: cfg, Surface: []svaf.Decision{svaf.Aligned, svaf.Guarded}}})
	introduce(t, alice, bob)
	for _, f := range []string{"the kiln fires at dawn", "the harbour ferry leaves at noon"} {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(f)}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	rej := am.published[1].Key
	v, ok := bob.VerdictOf(rej)
	if !ok || v.Decision != string(svaf.Rejected) || !v.Hidden {
		t.Fatalf("verdict %+v %t, want rejected and hidden", v, ok)
	}
	got, err := bob.Get(ctx, rej)
	if err != nil || got.Record.Key != rej {
		t.Fatalf("get of the rejected record: %+v %v, want it kept", got, err)
	}
	if hits, _ := bob.Recall(ctx, "harbour ferry", 10); len(hits) != 0 {
		t.Fatalf("recall of a rejected record under the strict surface: %+v", hits)
	}
}
