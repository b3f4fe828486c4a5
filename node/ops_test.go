package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/identity"
)

// TestPeersAreDialableWithX25519: the peers listing gives every address a
// /p2p/<peerId> (so it can be pasted into --bootstrap) and the peer's
// X25519 key as its handshake gave it.
func TestPeersAreDialableWithX25519(t *testing.T) {
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	bid := bob.Identity()
	am.peers = []PeerInfo{{NodeID: bid.NodeID, Name: "bob", PeerID: "12D3KooWbob", Group: "alpha",
		Addrs: []string{"/ip4/10.0.0.2/tcp/4001", "/ip4/10.0.0.3/tcp/4001/p2p/12D3KooWbob"}}}
	ps := alice.Peers()
	if len(ps) != 1 {
		t.Fatalf("peers: %+v", ps)
	}
	want := []string{"/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWbob", "/ip4/10.0.0.3/tcp/4001/p2p/12D3KooWbob"}
	if strings.Join(ps[0].Addrs, " ") != strings.Join(want, " ") {
		t.Errorf("addrs %v, want %v", ps[0].Addrs, want)
	}
	if ps[0].E2EPublicKey != bid.E2EPublicKeyDER() {
		t.Errorf("e2ePublicKey %q, want bob's %q", ps[0].E2EPublicKey, bid.E2EPublicKeyDER())
	}
	if st := alice.Status(); st.E2EPublicKey != alice.Identity().E2EPublicKeyDER() || st.E2EPublicKey == "" {
		t.Errorf("status e2ePublicKey %q", st.E2EPublicKey)
	}
}

// TestRememberToAPeerName: --to takes a peer's name when exactly one
// handshaken peer has it; an unknown name is not found, a shared one is
// ambiguous and lists the nodeIds.
func TestRememberToAPeerName(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	carol, _ := openNode(t, "carol", "alpha")
	carol2, _ := openNode(t, "carol", "alpha")
	for _, p := range []*Node{bob, carol, carol2} {
		introduce(t, alice, p)
	}
	res, err := alice.Remember(ctx, RememberInput{Fields: fields("for bob only"), To: "Bob"})
	if err != nil {
		t.Fatalf("remember --to Bob: %v", err)
	}
	if got := am.published[len(am.published)-1]; !got.IsSealed() || got.To != bob.Identity().NodeID {
		t.Fatalf("published %+v, want sealed for bob %s", got.To, bob.Identity().NodeID)
	}
	if s, err := alice.Get(ctx, res.Key); err != nil || s.Record.To != bob.Identity().NodeID {
		t.Fatalf("held record to %v (%v)", s, err)
	}
	_, err = alice.Remember(ctx, RememberInput{Fields: fields("for carol"), To: "carol"})
	if !errors.Is(err, ErrAmbiguous) || !errors.Is(err, ErrBadRequest) ||
		!strings.Contains(err.Error(), carol.Identity().NodeID) || !strings.Contains(err.Error(), carol2.Identity().NodeID) {
		t.Fatalf("ambiguous name: %v", err)
	}
	if _, err = alice.Remember(ctx, RememberInput{Fields: fields("for dave"), To: "dave"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"dave"`) {
		t.Fatalf("unknown name: %v", err)
	}
	// A nodeId still works as before.
	if _, err := alice.Remember(ctx, RememberInput{Fields: fields("for carol by id"), To: strings.ToUpper(carol.Identity().NodeID)}); err != nil {
		t.Fatalf("remember --to NODEID: %v", err)
	}
}

// TestRememberParentPrefix: a parent may be a unique key prefix; one that
// matches several records is refused, naming them.
func TestRememberParentPrefix(t *testing.T) {
	ctx := context.Background()
	n, _ := openNode(t, "alice", "alpha")
	p, err := n.Remember(ctx, RememberInput{Fields: fields("the parent")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Remember(ctx, RememberInput{Fields: fields("the child"), Parents: []string{strings.ToUpper(p.Key[5:17])}})
	if err != nil {
		t.Fatalf("remember with a prefix parent: %v", err)
	}
	s, err := n.Get(ctx, c.Key)
	if err != nil || len(s.Record.Parents()) != 1 || s.Record.Parents()[0] != p.Key {
		t.Fatalf("child's parents %v (%v), want %s", s.Record.Parents(), err, p.Key)
	}
	// Remember until two held keys share their first 4 hex digits (the
	// birthday bound makes that a few hundred records).
	seen := map[string]string{p.Key[5:9]: p.Key, c.Key[5:9]: c.Key}
	var shared string
	for i := 0; shared == "" && i < 5000; i++ {
		r, err := n.Remember(ctx, RememberInput{Fields: fields(fmt.Sprintf("filler %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := seen[r.Key[5:9]]; ok && k != r.Key {
			shared = r.Key[5:9]
		}
		seen[r.Key[5:9]] = r.Key
	}
	if shared == "" {
		t.Fatal("no two keys share a 4-digit prefix in 5000 records")
	}
	_, err = n.Remember(ctx, RememberInput{Fields: fields("ambiguous child"), Parents: []string{shared}})
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "give more of the key") {
		t.Fatalf("ambiguous parent prefix: %v", err)
	}
}

// TestForgetIsLocalAndFinal: a forgotten record is read, listed, recalled
// and served nowhere, answers "forgotten on this node", counts as held so
// a peer's copy is never accepted again, and one that a held record's
// lineage names is kept hidden so that lineage still walks.
func TestForgetIsLocalAndFinal(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	root, _ := alice.Remember(ctx, RememberInput{Fields: fields("forgettable root idea")})
	kid, _ := alice.Remember(ctx, RememberInput{Fields: fields("reply to the root"), Parents: []string{root.Key}})
	lone, _ := alice.Remember(ctx, RememberInput{Fields: fields("forgettable lone idea")})
	loneRec := am.published[2]
	if c, err := bob.Check(ctx, loneRec, source(alice)); err != nil {
		t.Fatal(err)
	} else if _, err := bob.Accept(ctx, c); err != nil {
		t.Fatal(err)
	}

	res, err := bob.Forget(ctx, lone.Key[5:15]) // a prefix, as typed
	if err != nil || res.Key != lone.Key || res.KeptForLineage || res.Already {
		t.Fatalf("forget lone: %+v %v", res, err)
	}
	if _, err := bob.Get(ctx, lone.Key); !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrForgotten) || !strings.Contains(err.Error(), "forgotten on this node") {
		t.Fatalf("get forgotten: %v", err)
	}
	if _, err := bob.Lineage(ctx, lone.Key, 0); !errors.Is(err, ErrForgotten) {
		t.Fatalf("lineage of forgotten: %v", err)
	}
	if hits, _ := bob.Recall(ctx, "forgettable", 10); len(hits) != 0 {
		t.Fatalf("recall finds a forgotten record: %+v", hits)
	}
	if mem, _ := bob.Recent(ctx, RecentOptions{}); len(mem) != 0 {
		t.Fatalf("recent lists a forgotten record: %+v", mem)
	}
	if _, ok, err := bob.Serve(ctx, lone.Key, alice.Identity().NodeID); ok || err != nil {
		t.Fatalf("a forgotten record is served: %v %v", ok, err)
	}
	if has, err := bob.Has(ctx, lone.Key); !has || err != nil {
		t.Fatalf("Has(forgotten) = %v %v: catch-up would fetch it again", has, err)
	}
	// The same record from a peer again: a duplicate that stores nothing.
	c, err := bob.Check(ctx, loneRec, source(alice))
	if err != nil || !c.Duplicate {
		t.Fatalf("forgotten record offered again: %+v %v", c, err)
	}
	if dup, err := bob.Accept(ctx, c); err != nil || !dup {
		t.Fatalf("accepting a forgotten record: %v %v", dup, err)
	}
	if _, err := bob.Get(ctx, lone.Key); !errors.Is(err, ErrForgotten) {
		t.Fatalf("forgotten record came back: %v", err)
	}
	// Alice's copy is untouched: forget is local.
	if _, err := alice.Get(ctx, lone.Key); err != nil {
		t.Fatal(err)
	}

	// A root the kid's lineage names is kept hidden for it.
	res, err = alice.Forget(ctx, root.Key)
	if err != nil || !res.KeptForLineage {
		t.Fatalf("forget root: %+v %v", res, err)
	}
	if _, err := alice.Get(ctx, root.Key); !errors.Is(err, ErrForgotten) {
		t.Fatalf("get forgotten root: %v", err)
	}
	th, err := alice.Thread(ctx, kid.Key, 0)
	if err != nil || len(th) != 1 || th[0].Key != kid.Key {
		t.Fatalf("thread of the kid: %+v %v, want only the kid", th, err)
	}
	if again, err := alice.Forget(ctx, root.Key); err != nil || !again.Already {
		t.Fatalf("forget twice: %+v %v", again, err)
	}
	if r, err := alice.Remember(ctx, RememberInput{Fields: fields("forgettable root idea")}); err != nil || !r.Duplicate || !r.Forgotten {
		t.Fatalf("remembering forgotten content again: %+v %v", r, err)
	}
	if err := alice.Store().Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSameTextTwoAuthors: a root key covers the content, not the author,
// so a second author's identical memory is a duplicate, but not the same
// author's: it is kept as an assertion, shown by Get, whether it was
// received from a peer or published by a local agent.
func TestSameTextTwoAuthors(t *testing.T) {
	ctx := context.Background()
	alice, _ := openNode(t, "alice", "alpha")
	bob, bm := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	mine, err := alice.Remember(ctx, RememberInput{Fields: fields("the build is green")})
	if err != nil {
		t.Fatal(err)
	}
	again, err := alice.Remember(ctx, RememberInput{Fields: fields("the build is green")})
	if err != nil || !again.Duplicate || again.SameAuthor == nil || !*again.SameAuthor || again.Asserted {
		t.Fatalf("same author again: %+v %v", again, err)
	}
	theirs, err := bob.Remember(ctx, RememberInput{Fields: fields("the build is green")})
	if err != nil || theirs.Key != mine.Key || theirs.Duplicate {
		t.Fatalf("bob's own: %+v %v (key %s)", theirs, err, mine.Key)
	}
	c, err := alice.Check(ctx, bm.published[0], source(bob))
	if err != nil || !c.Duplicate || !c.Asserted {
		t.Fatalf("bob's record at alice: %+v %v", c, err)
	}
	s, err := alice.Get(ctx, mine.Key)
	if err != nil || s.Record.CreatedBy != alice.Identity().NodeID || len(s.Assertions) != 1 || s.Assertions[0].CreatedBy != bob.Identity().NodeID {
		t.Fatalf("alice's get: %+v %v", s, err)
	}
	rec, err := cmb.Decode(s.Assertions[0].CMB)
	if err != nil || rec.VerifySignature(bob.Identity().PublicKey()) != nil || rec.Key != mine.Key {
		t.Fatalf("the assertion is not bob's signed record: %v", err)
	}

	// A local agent's own signed record of the same text.
	agent, _ := identity.Create(t.TempDir(), "agent", rand.Reader)
	arec, err := cmb.Build(cmb.Draft{Fields: fields("the build is green"), Group: "alpha", CreatedBy: agent.NodeID, CreatedAt: 5}, agent.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	res, err := alice.Publish(ctx, arec, agent.PublicKey())
	if err != nil || !res.Duplicate || res.SameAuthor == nil || *res.SameAuthor || !res.Asserted {
		t.Fatalf("agent's publish: %+v %v", res, err)
	}
	if s, _ := alice.Get(ctx, mine.Key); len(s.Assertions) != 2 {
		t.Fatalf("assertions after the agent's: %+v", s.Assertions)
	}
	if err := alice.Store().Check(ctx); err != nil {
		t.Fatal(err)
	}
}
