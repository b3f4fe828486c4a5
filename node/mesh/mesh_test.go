package mesh_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/mesh"
	"github.com/cmbnode/cmbnode/node/metrics"
)

// Three alpha members and one beta member, all bootstrapped to each other:
// alpha records reach every alpha member, and nothing of alpha reaches beta.
func TestGroupsGossipAndIsolation(t *testing.T) {
	a1 := newMember(t, "alpha", "a1", nil, nil)
	sub := a1.n.Events().Subscribe(64)
	defer sub.Close()
	a2 := newMember(t, "alpha", "a2", []*member{a1}, nil)
	a3 := newMember(t, "alpha", "a3", []*member{a1, a2}, nil)
	b1 := newMember(t, "beta", "b1", []*member{a1, a2, a3}, nil)
	waitPeers(t, 2, a1, a2, a3)

	// Handshaken peers are listed, pinned in the roster, and announced.
	peers := a1.m.Peers()
	if len(peers) != 2 {
		t.Fatalf("a1 lists %d peers, want 2: %+v", len(peers), peers)
	}
	for _, p := range peers {
		if p.Group != "alpha" || p.PeerID == "" || len(p.Addrs) == 0 {
			t.Errorf("peer entry incomplete: %+v", p)
		}
		rp, err := a1.n.Store().GetPeer(context.Background(), p.NodeID)
		if err != nil || len(rp.Ed25519) != 32 || len(rp.X25519) != 32 {
			t.Errorf("roster entry for %s: %+v, %v", p.NodeID, rp, err)
		}
	}
	joined := map[string]bool{}
	eventually(t, 5*time.Second, "two peer-joined events on a1", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Name == events.PeerJoined {
					joined[e.Data.(mesh.PeerEvent).NodeID] = true
				}
				continue
			default:
			}
			return len(joined) == 2
		}
	})
	if !joined[a2.nodeID()] || !joined[a3.nodeID()] {
		t.Fatalf("peer-joined for %v, want a2 and a3", joined)
	}

	key := a2.remember("alpha only", nil, "")
	for _, mb := range []*member{a1, a3} {
		eventually(t, 10*time.Second, mb.n.Identity().Name+" stores the alpha record", func() bool { return mb.has(key) })
	}
	key2 := a3.remember("second alpha record", nil, "")
	eventually(t, 10*time.Second, "a1 and a2 store the second record", func() bool { return a1.has(key2) && a2.has(key2) })

	// Beta was refused by every alpha member and holds nothing of alpha.
	eventually(t, 10*time.Second, "alpha members refuse beta's group", func() bool {
		return a1.m.Stats().GroupMismatches+a2.m.Stats().GroupMismatches+a3.m.Stats().GroupMismatches >= 3
	})
	b1.m.CatchUpNow(context.Background())
	time.Sleep(500 * time.Millisecond) // let any stray frame land before asserting absence
	if b1.m.PeerCount() != 0 {
		t.Errorf("beta has %d handshaken peers, want 0", b1.m.PeerCount())
	}
	if c := b1.n.Store().Count(); c != 0 {
		t.Errorf("beta stores %d records, want 0", c)
	}
	if s := b1.n.Counters.Snapshot(); s.Received != 0 || s.Accepted != 0 {
		t.Errorf("beta counters show alpha traffic: %+v", s)
	}
	for _, mb := range []*member{a1, a2, a3} {
		for _, p := range mb.m.Peers() {
			if p.NodeID == b1.nodeID() {
				t.Errorf("%s lists beta as a peer", mb.n.Identity().Name)
			}
		}
	}

	// peer-left fires when a member goes away.
	a3ID := a3.nodeID()
	a3.stop()
	left := false
	eventually(t, 20*time.Second, "a1 sees a3 leave", func() bool {
		for {
			select {
			case e := <-sub.C:
				if e.Name == events.PeerLeft && e.Data.(mesh.PeerEvent).NodeID == a3ID {
					left = true
				}
				continue
			default:
			}
			return left
		}
	})
	if a1.m.PeerCount() != 1 {
		t.Errorf("a1 has %d peers after a3 left, want 1", a1.m.PeerCount())
	}

	// The metrics page carries node and mesh families.
	reg := metrics.NewRegistry()
	if err := metrics.Register(reg, a1.n, a1.m); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.Handler(reg, nil))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"cmbnode_cmbs_accepted_total 2", "cmbnode_peers 1", "# TYPE cmbnode_cmbs_received_total counter"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics page lacks %q:\n%s", want, body)
		}
	}
}

// GossipSub starts with the first admitted peer (nothing to gossip
// before): a record remembered while alone reaches that peer by the
// catch-up of its admission, and once the two have grafted each other the
// next record goes by gossip (periodic catch-up is an hour away).
func TestGossipStartsWithTheFirstPeer(t *testing.T) {
	slow := func(c *mesh.Config) { c.CatchUpInterval = time.Hour }
	a := newMember(t, "alpha", "a", nil, slow)
	alone := a.remember("remembered alone", nil, "")
	b := newMember(t, "alpha", "b", []*member{a}, slow)
	stop := watch([]*member{b})
	waitPeers(t, 1, a, b)
	eventually(t, 10*time.Second, "b stores the record remembered alone", func() bool { return b.has(alone) })
	eventually(t, 10*time.Second, "a and b graft each other", func() bool {
		return a.m.Stats().GossipMesh == 1 && b.m.Stats().GossipMesh == 1
	})
	together := a.remember("remembered together", nil, "")
	eventually(t, 10*time.Second, "b stores the next record", func() bool { return b.has(together) })
	via := map[string]string{}
	for _, x := range stop()[0] {
		via[x.key] = x.via
	}
	if via[alone] == node.SourceGossip || via[together] != node.SourceGossip {
		t.Fatalf("paths: remembered alone by %q, together by %q; want catch-up, then gossip", via[alone], via[together])
	}
}
