package mesh

import (
	"sync/atomic"

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
	// GossipDropped counts what GossipSub discarded, by reason.
	GossipDropped map[string]int64 `json:"gossipDropped"`
}

// Stats returns the mesh's counters.
func (m *Mesh) Stats() Stats {
	return Stats{
		Peers: m.PeerCount(), PendingParents: m.pending.Len(),
		Handshakes: m.stats.handshakes.Load(), HandshakesFailed: m.stats.handshakeFailed.Load(),
		GroupMismatches: m.stats.groupMismatch.Load(), Published: m.stats.published.Load(),
		GossipUnadmitted: m.stats.gossipUnadmitted.Load(), FetchesServed: m.stats.fetchServed.Load(),
		DigestsServed: m.stats.digestServed.Load(), CatchUpRounds: m.stats.catchUpRounds.Load(),
		GossipDropped: m.drops.snapshot(),
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
	w.Map("cmbnode_gossip_dropped_total", "Messages GossipSub discarded under load, by reason; catch-up recovers them.", "counter", "reason", s.GossipDropped)
}
