package mesh_test

import (
	"context"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// A directed record is opened and stored only by its recipient; a third
// member relays it but holds nothing of it, even after catch-up. A directed
// record sent while the recipient was down reaches it by catch-up, sealed
// for it by the author.
func TestDirectedRecord(t *testing.T) {
	a := newMember(t, "alpha", "author", nil, nil)
	b := newMember(t, "alpha", "recipient", []*member{a}, nil)
	c := newMember(t, "alpha", "third", []*member{a, b}, nil)
	waitPeers(t, 2, a, b, c)

	key := a.remember("for the recipient only", nil, b.nodeID())
	eventually(t, 10*time.Second, "recipient stores the directed record", func() bool { return b.has(key) })
	rec, err := b.n.Store().Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Meta.Directed || !rec.Meta.Decrypted {
		t.Errorf("recipient's copy: directed=%v decrypted=%v, want both", rec.Meta.Directed, rec.Meta.Decrypted)
	}
	clear, err := cmb.Decode(rec.Raw)
	if err != nil || clear.Fields[cmb.Focus].Text != "for the recipient only" {
		t.Fatalf("recipient cannot read the record: %v %+v", err, clear)
	}
	eventually(t, 10*time.Second, "third member relays the directed record", func() bool {
		return c.n.Counters.Relayed.Load() >= 1
	})
	c.m.CatchUpNow(context.Background())
	if c.has(key) || c.n.Store().Count() != 0 {
		t.Fatalf("third member holds %d records, want none", c.n.Store().Count())
	}

	// Sent while the recipient is down: catch-up delivers it on return.
	b.stop()
	eventually(t, 20*time.Second, "author sees the recipient leave", func() bool { return a.m.PeerCount() == 1 })
	late := a.remember("while you were away", nil, b.nodeID())
	b.start([]*member{a, c})
	eventually(t, 20*time.Second, "recipient catches up the directed record", func() bool { return b.has(late) })
	rec, err = b.n.Store().Get(context.Background(), late)
	if err != nil {
		t.Fatal(err)
	}
	if clear, err := cmb.Decode(rec.Raw); err != nil || clear.Fields[cmb.Focus].Text != "while you were away" {
		t.Fatalf("caught-up directed record unreadable: %v", err)
	}
	c.m.CatchUpNow(context.Background())
	if c.has(late) {
		t.Fatal("third member obtained the directed record by catch-up")
	}
}

// A remix whose parent (and grandparent) never reached the receiver: the
// receiver stores it and fetches the lineage from the sender. Catch-up is
// off so only the fetch path can deliver the parents.
func TestRemixFetchesMissingParents(t *testing.T) {
	a := newMember(t, "alpha", "author", nil, mesh.DisableCatchUp)
	b := newMember(t, "alpha", "receiver", []*member{a}, mesh.DisableCatchUp)
	waitPeers(t, 1, a, b)

	// The ancestors are stored on a while it is detached, so they are never published.
	a.n.AttachMesh(nil)
	root := a.remember("root", nil, "")
	mid := a.remember("middle", []string{root}, "")
	a.n.AttachMesh(a.m)
	remix := a.remember("remix", []string{mid}, "")

	eventually(t, 10*time.Second, "receiver stores the remix and its fetched lineage", func() bool {
		return b.has(remix) && b.has(mid) && b.has(root)
	})
	if got := b.n.Counters.Fetched.Load(); got != 2 {
		t.Errorf("receiver fetched %d records, want 2", got)
	}
	if got := b.n.Counters.CaughtUp.Load(); got != 0 {
		t.Errorf("catch-up delivered %d records with catch-up off", got)
	}
}

// A remix whose parent no peer can serve yet is stored, and the parent stays
// pending, retried, until a member that holds it appears.
func TestPendingParentIsRetried(t *testing.T) {
	recv := newMember(t, "alpha", "receiver", nil, nil)
	r := newRogue(t) // a member that publishes a remix and never serves fetches
	r.dial(recv)
	r.join("alpha")
	r.serve()
	r.joinTopic("alpha")
	eventually(t, 10*time.Second, "receiver admits the member", func() bool { return recv.m.PeerCount() == 1 })
	eventually(t, 10*time.Second, "member sees the receiver on the topic", func() bool {
		return len(r.ps.ListPeers(topicOf(t, "alpha"))) == 1
	})

	parent := r.build("parent nobody serves yet", "alpha", r.id.NodeID)
	var f cmb.Fields
	f[cmb.Focus].Text = "remix"
	remix, err := cmb.Build(cmb.Draft{Fields: f, Parents: []string{parent.Key}, Group: "alpha", CreatedBy: r.id.NodeID, CreatedAt: time.Now().UnixMilli()}, r.id.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	r.publish(frameOf(t, remix, r.id.PublicKeyB64()))
	eventually(t, 10*time.Second, "receiver stores the remix", func() bool { return recv.has(remix.Key) })
	eventually(t, 10*time.Second, "the parent is pending", func() bool { return recv.m.Stats().PendingParents == 1 })
	time.Sleep(3 * time.Second) // several retry rounds that find nothing
	if recv.m.Stats().PendingParents != 1 {
		t.Fatal("the unfound parent was dropped from the pending set")
	}

	// A member holding the parent joins; the receiver gets it.
	holder := newMember(t, "alpha", "holder", []*member{recv}, nil)
	if _, err := holder.n.Publish(context.Background(), parent, r.id.PublicKey()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "receiver obtains the parent", func() bool { return recv.has(parent.Key) })
	eventually(t, 10*time.Second, "nothing pending", func() bool { return recv.m.Stats().PendingParents == 0 })
}
