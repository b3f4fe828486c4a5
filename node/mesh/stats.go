package mesh

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/node"
)

// stats are the mesh's own counters; record counters live in node.Counters.
type stats struct {
	handshakes         atomic.Int64
	handshakeFailed    atomic.Int64
	groupMismatch      atomic.Int64
	proofFailed        atomic.Int64
	epochExpired       atomic.Int64
	published          atomic.Int64
	gossipUnadmitted   atomic.Int64
	fetchServed        atomic.Int64
	digestServed       atomic.Int64
	catchUpRounds      atomic.Int64
	parentFetches      atomic.Int64
	pendingDropped     reasonCounts
	peerInfoDials      atomic.Int64
	peerInfoDropped    atomic.Int64
	knownRedialed      atomic.Int64
	serveThrottled     atomic.Int64
	serveTruncated     atomic.Int64
	servedBytes        atomic.Int64
	gossipDuplicates   atomic.Int64
	gossipResubscribes atomic.Int64
}

// Stats is a snapshot of the mesh's counters, for status and for the
// metrics endpoint (node/metrics reads it at each scrape).
type Stats struct {
	Peers            int   `json:"peers"`
	PendingParents   int   `json:"pendingParents"`
	Handshakes       int64 `json:"handshakes"`
	HandshakesFailed int64 `json:"handshakesFailed"`
	GroupMismatches  int64 `json:"groupMismatches"`
	// ProofsFailed counts peers refused for a missing, malformed or wrong
	// group membership proof (private groups).
	ProofsFailed int64 `json:"proofsFailed"`
	// EpochsExpired counts sessions ended because their secret epoch was
	// superseded longer than the grace period ago.
	EpochsExpired    int64 `json:"epochsExpired"`
	Published        int64 `json:"published"`
	GossipUnadmitted int64 `json:"gossipUnadmitted"`
	FetchesServed    int64 `json:"fetchesServed"`
	DigestsServed    int64 `json:"digestsServed"`
	CatchUpRounds    int64 `json:"catchUpRounds"`
	// PeerInfoDials counts dials started for peers learned from peer-info.
	PeerInfoDials int64 `json:"peerInfoDials"`
	// PeerInfoDialsDropped counts advertised peers not dialled because a
	// peer-info bound was reached; PeerInfoDialsLimited counts them by
	// bound: advertiser-members, advertiser-strangers (one advertiser's
	// budget), total-members, total-strangers (the mesh's), slots (dials
	// running at once), advertisers (advertisers with a budget in use).
	PeerInfoDialsDropped int64            `json:"peerInfoDialsDropped"`
	PeerInfoDialsLimited map[string]int64 `json:"peerInfoDialsLimited"`
	// PeerstoreRedials counts remembered members reconnected at start
	// from the peerstore file.
	PeerstoreRedials int64 `json:"peerstoreRedials"`
	// ServeThrottled counts fetch and catch-up answers held back because
	// their peer had used its ServeRate; ServeTruncated the answers cut at
	// a per-request cap (the requester asks again for the rest);
	// ServedBytes the bytes of those answers sent.
	ServeThrottled int64 `json:"serveThrottled"`
	ServeTruncated int64 `json:"serveTruncated"`
	ServedBytes    int64 `json:"servedBytes"`
	// Reach is reachability, relays in use and hole-punch counts.
	Reach node.Reach `json:"reach"`
	// GossipDropped counts what GossipSub discarded, by reason.
	GossipDropped map[string]int64 `json:"gossipDropped"`
	// GossipGraylisted is the number of peers GossipSub's scorer tracks
	// (connected, or disconnected and still remembered) whose score is
	// below the graylist threshold: every RPC they send is dropped unread.
	GossipGraylisted int `json:"gossipGraylisted"`
	// GossipMesh is the number of peers grafted into our GossipSub mesh for
	// the group topic; a peer with a negative score is pruned from it.
	GossipMesh int `json:"gossipMesh"`
	// ParentFetches counts missing-parent fetch attempts, one per key and
	// round; PendingDropped the missing parents given up, by reason
	// (depth, full, author-cap, expired): catch-up brings what peers hold.
	ParentFetches  int64            `json:"parentFetches"`
	PendingDropped map[string]int64 `json:"pendingDropped"`
	// GossipDuplicates counts group messages GossipSub received again after
	// the first copy (its seen cache dropped them before validation): the
	// redundancy of the mesh, per record about the mesh degree.
	GossipDuplicates int64 `json:"gossipDuplicates"`
	// GossipResubscribes counts repairs of a member GossipSub had wrongly
	// dropped from the topic (resubscribe.go): its gossip streams reset so
	// both sides send their subscriptions again.
	GossipResubscribes int64 `json:"gossipResubscribes"`
}

// reasonCounts are counters by reason.
type reasonCounts struct {
	mu sync.Mutex
	by map[string]int64
}

func (r *reasonCounts) add(reason string, n int64) {
	r.mu.Lock()
	if r.by == nil {
		r.by = map[string]int64{}
	}
	r.by[reason] += n
	r.mu.Unlock()
}

func (r *reasonCounts) snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.by)
}

// peerScores is the latest snapshot of GossipSub's peer scores, taken by
// its score inspector every scoreInterval. It is for reporting only:
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
// (at most scoreInterval old), and whether the scorer tracks that peer.
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
		ProofsFailed: m.stats.proofFailed.Load(), EpochsExpired: m.stats.epochExpired.Load(),
		GossipUnadmitted: m.stats.gossipUnadmitted.Load(), FetchesServed: m.stats.fetchServed.Load(),
		DigestsServed: m.stats.digestServed.Load(), CatchUpRounds: m.stats.catchUpRounds.Load(),
		PeerInfoDials: m.stats.peerInfoDials.Load(), PeerInfoDialsDropped: m.stats.peerInfoDropped.Load(),
		PeerInfoDialsLimited: m.peerInfoBudget.snapshot(),
		GossipDropped:        m.drops.snapshot(), GossipGraylisted: m.scores.below(graylistThreshold),
		GossipMesh: m.drops.meshPeers(), PeerstoreRedials: m.stats.knownRedialed.Load(),
		Reach: m.Reach(), ParentFetches: m.stats.parentFetches.Load(), PendingDropped: m.stats.pendingDropped.snapshot(),
		ServeThrottled: m.stats.serveThrottled.Load(), ServeTruncated: m.stats.serveTruncated.Load(),
		ServedBytes: m.stats.servedBytes.Load(), GossipDuplicates: m.stats.gossipDuplicates.Load(),
		GossipResubscribes: m.stats.gossipResubscribes.Load(),
	}
}
