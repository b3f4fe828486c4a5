package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/store"
)

// fakeMesh records what the node publishes.
type fakeMesh struct {
	published []*cmb.Record
	peers     []PeerInfo
}

func (f *fakeMesh) Publish(_ context.Context, r *cmb.Record, raw []byte) error {
	if raw != nil && !bytes.Equal(raw, r.Encode()) {
		return fmt.Errorf("publish %s: raw is not the record's encoding", r.Key)
	}
	f.published = append(f.published, r)
	return nil
}
func (f *fakeMesh) Peers() []PeerInfo { return f.peers }
func (f *fakeMesh) PeerID() string    { return "12D3KooWfake" }
func (f *fakeMesh) Addrs() []string   { return []string{"/ip4/127.0.0.1/tcp/1/p2p/12D3KooWfake"} }

func openNode(t *testing.T, name, grp string) (*Node, *fakeMesh) {
	t.Helper()
	home := t.TempDir()
	id, err := identity.Create(home, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(Options{Home: home, Group: grp, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	m := &fakeMesh{}
	n.AttachMesh(m)
	return n, m
}

func fields(focus string) cmb.Fields {
	var f cmb.Fields
	f[cmb.Focus].Text = focus
	return f
}

// introduce pins each node's keys in the other's roster, as a handshake would.
func introduce(t *testing.T, a, b *Node) {
	t.Helper()
	for _, p := range [][2]*Node{{a, b}, {b, a}} {
		id := p[1].Identity()
		if err := p[0].PinPeer(context.Background(), id.NodeID, id.PublicKey(), id.X25519.PublicKey().Bytes(), id.Name); err != nil {
			t.Fatal(err)
		}
	}
}

func source(from *Node) Source {
	id := from.Identity()
	return Source{PeerID: "peer-" + id.Name, NodeID: id.NodeID, AuthorKey: id.PublicKeyB64(), AuthorE2E: id.E2EPublicKeyDER(), Via: "test"}
}

func TestRememberIsDurableThenPublished(t *testing.T) {
	ctx := context.Background()
	n, m := openNode(t, "alice", "alpha")
	res, err := n.Remember(ctx, RememberInput{Fields: fields("ship the parser")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := n.Get(ctx, res.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Record.Group != "alpha" || got.Record.CreatedBy != n.Identity().NodeID || got.Record.Fields[cmb.Mood].Text != "neutral" {
		t.Fatalf("stored record: %s", got.Raw)
	}
	if len(m.published) != 1 || m.published[0].Key != res.Key {
		t.Fatalf("published %d records", len(m.published))
	}
	again, err := n.Remember(ctx, RememberInput{Fields: fields("ship the parser")})
	if err != nil || !again.Duplicate || again.Key != res.Key {
		t.Fatalf("second remember: %+v %v", again, err)
	}
	if len(m.published) != 1 {
		t.Fatal("a duplicate was published again")
	}
	child, err := n.Remember(ctx, RememberInput{Fields: fields("parser shipped"), Parents: []string{res.Key}})
	if err != nil {
		t.Fatal(err)
	}
	lin, err := n.Lineage(ctx, child.Key, 5)
	if err != nil || len(lin.Ancestors) != 1 || lin.Ancestors[0] != res.Key {
		t.Fatalf("lineage: %+v %v", lin, err)
	}
	if _, err := n.Remember(ctx, RememberInput{Fields: fields("x"), Parents: []string{"cmb1-" + strings.Repeat("0", 64)}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown parent: %v", err)
	}
	if _, err := n.Remember(ctx, RememberInput{Fields: fields("x"), Parents: []string{"nope"}}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad parent: %v", err)
	}
	hits, err := n.Recall(ctx, "parser", 10)
	if err != nil || len(hits) != 2 {
		t.Fatalf("recall: %+v %v", hits, err)
	}
	if st := n.Status(); st.CMBs != 2 || st.PeerID == "" || st.Counters.Authored != 2 {
		t.Fatalf("status: %+v", st)
	}
}

func TestReceivePipeline(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	carol, _ := openNode(t, "carol", "alpha")
	eve, _ := openNode(t, "eve", "beta")
	introduce(t, alice, bob)
	introduce(t, alice, carol)
	sub := bob.Events().Subscribe(8)
	defer sub.Close()

	res, _ := alice.Remember(ctx, RememberInput{Fields: fields("broadcast to alpha")})
	rec := am.published[0]
	c, err := bob.Check(ctx, rec, source(alice))
	if err != nil {
		t.Fatalf("bob checks alice's record: %v", err)
	}
	if dup, err := bob.Accept(ctx, c); err != nil || dup {
		t.Fatalf("accept: %v %v", dup, err)
	}
	select {
	case ev := <-sub.C:
		if ev.Name != events.CMBAccepted || ev.Data.(AcceptedEvent).Key != res.Key {
			t.Fatalf("event %+v", ev)
		}
		// Fields, seq and cursor are filled in only when a listener is there.
		if a := ev.Data.(AcceptedEvent); a.Fields["focus"].Text != "broadcast to alpha" || a.Seq != 1 || a.Cursor == "" {
			t.Fatalf("event lacks its fields, seq or cursor: %+v", a)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no cmb-accepted event")
	}
	if c, _ := bob.Check(ctx, rec, source(alice)); c == nil || !c.Duplicate {
		t.Fatal("second delivery not flagged duplicate")
	}

	// A member of another group refuses it before anything else.
	if _, err := eve.Check(ctx, rec, source(alice)); !errors.Is(err, cmb.ErrWrongGroup) {
		t.Fatalf("eve: %v", err)
	}
	if eve.Store().Count() != 0 {
		t.Fatal("beta stored an alpha record")
	}

	// Directed: sealed for bob; carol relays but cannot read or store it.
	dres, err := alice.Remember(ctx, RememberInput{Fields: fields("for bob only"), To: bob.Identity().NodeID})
	if err != nil {
		t.Fatal(err)
	}
	sealed := am.published[len(am.published)-1]
	if !sealed.IsSealed() || strings.Contains(string(sealed.Encode()), "for bob only") {
		t.Fatalf("directed record published in clear: %s", sealed.Encode())
	}
	if _, err := carol.Check(ctx, sealed, source(alice)); !errors.Is(err, ErrNotForUs) {
		t.Fatalf("carol: %v", err)
	}
	c, err = bob.Check(ctx, sealed, source(alice))
	if err != nil {
		t.Fatalf("bob opens: %v", err)
	}
	if !c.Decrypted || !c.Directed || c.Record.Fields[cmb.Focus].Text != "for bob only" {
		t.Fatalf("bob's view: %+v", c)
	}
	bob.Accept(ctx, c)
	if got, err := bob.Get(ctx, dres.Key); err != nil || got.Record.IsSealed() || !got.Directed {
		t.Fatalf("bob stored: %v", err)
	}
	// Without a pinned X25519 key a sealed record cannot be opened.
	dave, _ := openNode(t, "dave", "alpha")
	if _, err := alice.Remember(ctx, RememberInput{Fields: fields("for bob again"), To: bob.Identity().NodeID}); err != nil {
		t.Fatal(err)
	}
	srcNoX := source(alice)
	srcNoX.AuthorE2E = ""
	if _, err := dave.Check(ctx, am.published[len(am.published)-1], srcNoX); !errors.Is(err, ErrNotForUs) {
		t.Fatalf("dave relays a record for bob: %v", err)
	}

	// Key conflict: a frame claiming alice's nodeId with another key.
	_, mallory, _ := ed25519.GenerateKey(rand.Reader)
	forged := rec.Clone()
	forged.Sign(mallory)
	src := source(alice)
	src.AuthorKey = cmb.EncodeKey(mallory.Public().(ed25519.PublicKey))
	if _, err := bob.Check(ctx, forged, src); !errors.Is(err, ErrRejected) {
		t.Fatalf("conflicting key: %v", err)
	}
	if bob.Counters.KeyConflicts.Load() == 0 {
		t.Fatal("key conflict not counted")
	}
	// Forged signature with the honest key in the frame.
	src = source(alice)
	if _, err := bob.Check(ctx, forged, src); !errors.Is(err, cmb.ErrBadSignature) {
		t.Fatalf("forged signature: %v", err)
	}
	snap := bob.Counters.Snapshot()
	if snap.Rejected["bad-signature"] == 0 || snap.Rejected["key-conflict"] == 0 {
		t.Fatalf("rejections not counted by reason: %+v", snap.Rejected)
	}
	if _, err := alice.Remember(ctx, RememberInput{Fields: fields("x"), To: eve.Identity().NodeID}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("directed to an unknown node: %v", err)
	}
}

func TestPublishAgentSignedRecord(t *testing.T) {
	ctx := context.Background()
	n, m := openNode(t, "host", "alpha")
	agent, err := identity.Create(t.TempDir(), "agent", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cmb.Build(cmb.Draft{Fields: fields("agent thought"), Group: "alpha", CreatedBy: agent.NodeID, CreatedAt: 1}, agent.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.Publish(ctx, rec, agent.PublicKey())
	if err != nil || res.Duplicate || len(m.published) != 1 {
		t.Fatalf("publish: %+v %v", res, err)
	}
	other, _ := identity.Create(t.TempDir(), "other", rand.Reader)
	if _, err := n.Publish(ctx, rec, other.PublicKey()); !errors.Is(err, ErrRejected) {
		t.Fatalf("wrong key: %v", err)
	}
	beta, _ := cmb.Build(cmb.Draft{Fields: fields("beta thought"), Group: "beta", CreatedBy: agent.NodeID, CreatedAt: 1}, agent.Ed25519)
	if _, err := n.Publish(ctx, beta, agent.PublicKey()); !errors.Is(err, ErrRejected) {
		t.Fatalf("other group: %v", err)
	}
	if _, err := n.Store().GetPeer(ctx, agent.NodeID); err != nil {
		t.Fatalf("agent key not pinned: %v", err)
	}
	if _, err := n.Store().GetPeer(ctx, other.NodeID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rejected key pinned: %v", err)
	}
}
