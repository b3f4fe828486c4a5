package metrics_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/mesh"
	"github.com/cmbnode/cmbnode/node/metrics"
)

// fixedStats stands in for a mesh with known counters.
type fixedStats mesh.Stats

func (f fixedStats) Stats() mesh.Stats { return mesh.Stats(f) }

func TestServe(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	id, err := identity.Create(home, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.Counters.CountReject("bad-signature")
	n.Counters.CountReject(`b"q`)
	n.Counters.CountReject(`b"q`)
	var f cmb.Fields
	f[cmb.Focus].Text = "counted"
	if _, err := n.Remember(ctx, node.RememberInput{Fields: f}); err != nil {
		t.Fatal(err)
	}

	reg := metrics.NewRegistry()
	// A real mesh registers libp2p's families; the cmbnode mesh families
	// are read from fixed stats so their values can be checked.
	m, err := mesh.Start(ctx, mesh.Config{Node: n, Public: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stats := fixedStats{Peers: 3, PendingParents: 2, Handshakes: 7, CatchUpRounds: 5, GossipMesh: 1,
		GossipDropped: map[string]int64{"queue-full": 4, "a": 1}, PeerInfoDialsLimited: map[string]int64{"advertiser-strangers": 9},
		ParentFetches: 9, PendingDropped: map[string]int64{"author-cap": 6, "expired": 2},
		GroupMismatches: 8, ProofsFailed: 11, EpochsExpired: 3}
	if err := metrics.Register(reg, n, stats); err != nil {
		t.Fatal(err)
	}
	s, err := metrics.Serve("127.0.0.1:0", metrics.Handler(reg, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	for _, want := range []string{
		"# HELP cmbnode_cmbs_rejected_total Rejected records and handshakes, by reason.\n# TYPE cmbnode_cmbs_rejected_total counter\n",
		`cmbnode_cmbs_rejected_total{reason="bad-signature"} 1` + "\n",
		`cmbnode_cmbs_rejected_total{reason="b\"q"} 2` + "\n",
		"# HELP cmbnode_store_cmbs Records held in the store.\n# TYPE cmbnode_store_cmbs gauge\ncmbnode_store_cmbs 1\n",
		"# TYPE cmbnode_cmbs_authored_total counter\ncmbnode_cmbs_authored_total 1\n",
		"cmbnode_cmbs_received_total 0\n",
		"# TYPE cmbnode_event_subscribers_dropped_total counter\ncmbnode_event_subscribers_dropped_total 0\n",
		"# HELP cmbnode_peers Handshaken peers of the group.\n# TYPE cmbnode_peers gauge\ncmbnode_peers 3\n",
		"cmbnode_pending_parents 2\n",
		"# TYPE cmbnode_handshakes_total counter\ncmbnode_handshakes_total 7\n",
		"cmbnode_catchup_rounds_total 5\n",
		"cmbnode_gossip_mesh_peers 1\n",
		"cmbnode_gossip_graylisted_peers 0\n",
		`cmbnode_gossip_dropped_total{reason="a"} 1` + "\n" + `cmbnode_gossip_dropped_total{reason="queue-full"} 4` + "\n",
		`cmbnode_peerinfo_dials_limited_total{bound="advertiser-strangers"} 9` + "\n",
		"# TYPE cmbnode_svaf_verdicts_total counter\n" + `cmbnode_svaf_verdicts_total{decision="aligned"} 0` + "\n",
		`cmbnode_svaf_verdicts_total{decision="rejected"} 0` + "\n",
		"# TYPE cmbnode_parent_fetches_total counter\ncmbnode_parent_fetches_total 9\n",
		`cmbnode_pending_parents_dropped_total{reason="author-cap"} 6` + "\n" + `cmbnode_pending_parents_dropped_total{reason="expired"} 2` + "\n",
		"# TYPE cmbnode_roster_expired_total counter\ncmbnode_roster_expired_total 0\n",
		"# TYPE cmbnode_group_mismatches_total counter\ncmbnode_group_mismatches_total 8\n",
		"# TYPE cmbnode_group_proofs_failed_total counter\ncmbnode_group_proofs_failed_total 11\n",
		"# TYPE cmbnode_group_epochs_expired_total counter\ncmbnode_group_epochs_expired_total 3\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	for _, prefix := range []string{"go_", "process_", "libp2p_rcmgr_", "libp2p_"} {
		if !strings.Contains(body, "\n# TYPE "+prefix) {
			t.Errorf("page has no %s* family:\n%s", prefix, body)
		}
	}
	if r, err := http.Post("http://"+s.Addr()+"/", "text/plain", nil); err != nil || r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", r, err)
	}
	// Another node's registry is its own: nothing leaks through a global one.
	if err := metrics.Register(metrics.NewRegistry(), n, nil); err != nil {
		t.Fatalf("a second registry: %v", err)
	}
}

// Without a mesh the endpoint carries the node's families and none of the
// mesh's.
func TestRegisterWithoutMesh(t *testing.T) {
	home := t.TempDir()
	id, err := identity.Create(home, "solo", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	reg := metrics.NewRegistry()
	if err := metrics.Register(reg, n, nil); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	if !names["cmbnode_store_cmbs"] || !names["cmbnode_cmbs_authored_total"] || names["cmbnode_peers"] || !names["go_goroutines"] {
		t.Fatalf("families without a mesh: %v", names)
	}
}
