package mesh_test

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/node/mesh"
)

// TestGossipWinsBackADroppedMember: GossipSub drops a peer from the topic
// when its own outbound stream to that peer dies, and learns the peer's
// subscription again only from the hello on the peer's next stream. B
// resets the stream A writes to it — one side of a connection closing
// under both sides' streams while another connection stays — so A drops B
// while B's stream to A lives on and sends no new hello. Without repair,
// A would never publish or forward to B again; catch-up is off, so only
// gossip can deliver.
func TestGossipWinsBackADroppedMember(t *testing.T) {
	a := newMember(t, "lab", "a", nil, mesh.DisableCatchUp)
	b := newMember(t, "lab", "b", []*member{a}, mesh.DisableCatchUp)
	waitPeers(t, 1, a, b)
	aID, _ := peer.Decode(a.m.PeerID())
	bID, _ := peer.Decode(b.m.PeerID())
	eventually(t, 20*time.Second, "A and B see each other on the topic", func() bool {
		return slices.Contains(mesh.TopicPeers(a.m), bID) && slices.Contains(mesh.TopicPeers(b.m), aID)
	})
	first := a.remember("before the reset", nil, "")
	eventually(t, 10*time.Second, "A's first record reaches B", func() bool { return b.has(first) })

	if n := mesh.ResetGossipStreams(b.m, aID, network.DirInbound); n != 1 {
		t.Fatalf("B reset %d inbound gossip streams from A, want 1", n)
	}
	eventually(t, 10*time.Second, "A drops B from the topic", func() bool {
		return !slices.Contains(mesh.TopicPeers(a.m), bID)
	})
	eventually(t, 20*time.Second, "A counts B on the topic again", func() bool {
		return slices.Contains(mesh.TopicPeers(a.m), bID)
	})
	after := a.remember("after the reset", nil, "")
	eventually(t, 10*time.Second, "A's record after the reset reaches B by gossip", func() bool { return b.has(after) })
	if !slices.Contains(mesh.TopicPeers(b.m), aID) {
		t.Fatal("B dropped A from the topic in the repair")
	}
	if got := a.m.Stats().GossipResubscribes; got < 1 {
		t.Fatalf("A counts %d resubscribes, want at least 1", got)
	}
	// The repair does not repeat once both sides count each other.
	settled := a.m.Stats().GossipResubscribes + b.m.Stats().GossipResubscribes
	time.Sleep(3 * time.Second)
	if now := a.m.Stats().GossipResubscribes + b.m.Stats().GossipResubscribes; now != settled {
		t.Fatalf("resubscribes went on after the repair: %d then %d", settled, now)
	}
}
