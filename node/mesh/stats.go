package mesh

import (
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"

	"cmbnode/node/metrics"
)

// stats are the mesh's own counters; record counters live in node.Counters.
type stats struct {
	handshakes       atomic.Int64
	handshakeFailed  atomic.Int64
	groupMismatch    atomic.Int64
	published        atomic.Int64
	gossipUnadmitted atomic.Int64
	fetchServed      atomic.Int64
	digestServed     atomic.Int64
	catchUpRounds    atomic.Int64
	fetchDepthCut    atomic.Int64
	pendingOverflow  atomic.Int64
	peerInfoDials    atomic.Int64
	peerInfoDropped  atomic.Int64
}

// Stats is a snapshot of the mesh's counters.
type Stats struct {
	Peers            int   `json:"peers"`
	PendingParents   int   `json:"pendingParents"`
	Handshakes       int64 `json:"handshakes"`
	HandshakesFailed int64 `json:"handshakesFailed"`
	GroupMismatches  int64 `json:"groupMismatches"`
	Published        int64 `json:"published"`
	GossipUnadmitted int64 `json:"gossipUnadmitted"`
	FetchesServed    int64 `json:"fetchesServed"`
	DigestsServed    int64 `json:"digestsServed"`
	CatchUpRounds    int64 `json:"catchUpRounds"`
	// PeerInfoDials counts dials started for peers learned from peer-info.
	PeerInfoDials int64 `json:"peerInfoDials"`
	// PeerInfoDialsDropped counts advertised peers not dialled because a
	// peer-info bound was reached (the session's budget, or no free slot).
	PeerInfoDialsDropped int64 `json:"peerInfoDialsDropped"`
	// GossipDropped counts what GossipSub discarded, by reason.
	GossipDropped map[string]int64 `json:"gossipDropped"`
	// GossipGraylisted is the number of peers GossipSub's scorer tracks
	// (connected, or disconnected and still remembered) whose score is
	// below the graylist threshold: every RPC they send is dropped unread.
	GossipGraylisted int `json:"gossipGraylisted"`
	// GossipMesh is the number of peers grafted into our GossipSub mesh for
	// the group topic; a peer with a negative score is pruned from it.
	GossipMesh int `json:"gossipMesh"`
}

// peerScores is the latest snapshot of GossipSub's peer scores, taken by
// its score inspector every scoreInspectPeriod. It is for reporting only:
// GossipSub decides with its live scores, never with this copy.
type peerScores struct {
	mu     sync.Mutex
	scores map[peer.ID]float64
}

// set replaces the snapshot (pubsub.PeerScoreInspectFn). GossipSub calls it
// on a goroutine of its own, so it must not block.
func (s *peerScores) set(scores map[peer.ID]float64) {
	s.mu.Lock()
	s.scores = scores
	s.mu.Unlock()
}

func (s *peerScores) get(pid peer.ID) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.scores[pid]
	return v, ok
}

func (s *peerScores) below(threshold float64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.scores {
		if v < threshold {
			n++
		}
	}
	return n
}

// GossipScore returns a peer's GossipSub score as of the last inspection
// (at most a second old), and whether the scorer tracks that peer.
func (m *Mesh) GossipScore(peerID string) (float64, bool) {
	pid, err := peer.Decode(peerID)
	if err != nil {
		return 0, false
	}
	return m.scores.get(pid)
}

// Stats returns the mesh's counters.
func (m *Mesh) Stats() Stats {
	return Stats{
		Peers: m.PeerCount(), PendingParents: m.pending.Len(),
		Handshakes: m.stats.handshakes.Load(), HandshakesFailed: m.stats.handshakeFailed.Load(),
		GroupMismatches: m.stats.groupMismatch.Load(), Published: m.stats.published.Load(),
		GossipUnadmitted: m.stats.gossipUnadmitted.Load(), FetchesServed: m.stats.fetchServed.Load(),
		DigestsServed: m.stats.digestServed.Load(), CatchUpRounds: m.stats.catchUpRounds.Load(),
		PeerInfoDials: m.stats.peerInfoDials.Load(), PeerInfoDialsDropped: m.stats.peerInfoDropped.Load(),
		GossipDropped: m.drops.snapshot(), GossipGraylisted: m.scores.below(graylistThreshold),
		GossipMesh: m.drops.meshPeers(),
	}
}

// WriteMetrics adds the mesh's families to a metrics page (metrics.Source).
func (m *Mesh) WriteMetrics(w *metrics.Writer) {
	if m == nil {
		return
	}
	s := m.Stats()
	w.Gauge("cmbnode_peers", "Handshaken peers of the group.", int64(s.Peers))
	w.Gauge("cmbnode_pending_parents", "Missing parents waiting to be fetched.", int64(s.PendingParents))
	w.Counter("cmbnode_handshakes_total", "Completed /mmp/1.1.0 handshakes.", s.Handshakes)
	w.Counter("cmbnode_handshakes_failed_total", "Refused or failed handshakes.", s.HandshakesFailed)
	w.Counter("cmbnode_group_mismatches_total", "Handshakes from peers of another group.", s.GroupMismatches)
	w.Counter("cmbnode_gossip_published_total", "Records published on the group topic.", s.Published)
	w.Counter("cmbnode_gossip_unadmitted_total", "Gossip from peers not handshaken into the group, ignored.", s.GossipUnadmitted)
	w.Counter("cmbnode_fetches_served_total", "Fetch requests served to peers.", s.FetchesServed)
	w.Counter("cmbnode_catchup_rounds_total", "Catch-up reconciliations run.", s.CatchUpRounds)
	w.Counter("cmbnode_peerinfo_dials_total", "Dials started for peers learned from peer-info.", s.PeerInfoDials)
	w.Counter("cmbnode_peerinfo_dials_dropped_total", "Peers learned from peer-info not dialled because a bound was reached.", s.PeerInfoDialsDropped)
	w.Gauge("cmbnode_gossip_mesh_peers", "Peers grafted into the GossipSub mesh of the group topic.", int64(s.GossipMesh))
	w.Gauge("cmbnode_gossip_graylisted_peers", "Peers scoring below GossipSub's graylist threshold, whose RPCs are ignored.", int64(s.GossipGraylisted))
	w.Map("cmbnode_gossip_dropped_total", "Messages GossipSub discarded under load, by reason; catch-up recovers them.", "counter", "reason", s.GossipDropped)
}
