package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
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
