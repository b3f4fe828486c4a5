// Package metrics serves a node's Prometheus endpoint from a private
// registry (never the process-global one, so two nodes in one process each
// export their own): the node core's and the mesh's cmbnode_* families, read
// at scrape time by a collector of this package, the Go runtime (go_*) and
// process (process_*) collectors, and whatever libp2p registers on it
// (libp2p_*, given to the mesh as its Metrics registerer).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// NewRegistry returns a private registry holding the Go runtime and process
// collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MeshStats is what the endpoint reads of a running mesh.
type MeshStats interface {
	Stats() mesh.Stats
}

// Register adds the cmbnode_* families of n, and of m unless m is nil, to
// reg. They are read when scraped, so they are never stale.
func Register(reg prometheus.Registerer, n *node.Node, m MeshStats) error {
	if err := reg.Register(newCollector(n, m)); err != nil {
		return fmt.Errorf("metrics: register the node's families: %w", err)
	}
	if err := reg.Register(newRetrievalCollector(n)); err != nil {
		return fmt.Errorf("metrics: register the admission and encoder families: %w", err)
	}
	return nil
}

// Handler serves what g gathers in the Prometheus text format, to GET and
// HEAD only.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	opt.Logger(&log)
	// A collector that fails leaves its families out; the rest is served.
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: errorLog{log}, ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(rw, r)
	})
}

// errorLog is promhttp's error log on slog.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) { l.log.Warn("metrics: gathering", "err", fmt.Sprint(v...)) }

// scalar is a family of one unlabelled sample read from a view V.
type scalar[V any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(*V) int64
}

func counter[V any](name, help string, get func(*V) int64) scalar[V] {
	return scalar[V]{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, get}
}

func gauge[V any](name, help string, get func(*V) int64) scalar[V] {
	return scalar[V]{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, get}
}

// nodeView is what one scrape reads of the node.
type nodeView struct {
	c       node.Snapshot
	cmbs    int
	dropped int64
}

// collector reads the node's counters and the mesh's Stats at each scrape.
type collector struct {
	n        *node.Node
	m        MeshStats
	node     []scalar[nodeView]
	rejected *prometheus.Desc
	mesh     []scalar[mesh.Stats]
	gDropped *prometheus.Desc
	piLimit  *prometheus.Desc
	pDropped *prometheus.Desc
}

func newCollector(n *node.Node, m MeshStats) *collector {
	type nv = nodeView
	type ms = mesh.Stats
	return &collector{
		n: n, m: m,
		node: []scalar[nv]{
			counter("cmbnode_cmbs_authored_total", "Records authored on this node.", func(v *nv) int64 { return v.c.Authored }),
			counter("cmbnode_cmbs_received_total", "Records received from peers on every path (gossip, fetch, catch-up).", func(v *nv) int64 { return v.c.Received }),
			counter("cmbnode_cmbs_accepted_total", "Received records stored for the first time.", func(v *nv) int64 { return v.c.Accepted }),
			counter("cmbnode_cmbs_duplicates_total", "Received records already held.", func(v *nv) int64 { return v.c.Duplicates }),
			counter("cmbnode_cmbs_relayed_total", "Valid records directed to another member: relayed, never stored.", func(v *nv) int64 { return v.c.Relayed }),
			counter("cmbnode_key_conflicts_total", "Authors or peers presenting a key other than the pinned one.", func(v *nv) int64 { return v.c.KeyConflicts }),
			counter("cmbnode_keys_replaced_total", "Author keys known only from gossip that a handshake replaced.", func(v *nv) int64 { return v.c.KeysReplaced }),
			counter("cmbnode_cmbs_quarantined_total", "Records quarantined because the author key they were admitted under was replaced.", func(v *nv) int64 { return v.c.Quarantined }),
			counter("cmbnode_cmbs_fetched_total", "Records obtained by fetching a missing parent.", func(v *nv) int64 { return v.c.Fetched }),
			counter("cmbnode_cmbs_caught_up_total", "Records obtained by catch-up.", func(v *nv) int64 { return v.c.CaughtUp }),
			gauge("cmbnode_store_cmbs", "Records held in the store.", func(v *nv) int64 { return int64(v.cmbs) }),
			counter("cmbnode_event_subscribers_dropped_total", "Local event listeners dropped for falling behind.", func(v *nv) int64 { return v.dropped }),
			counter("cmbnode_roster_expired_total", "Roster entries expired: nodeIds that authored no stored record, unseen too long or beyond the cap.", func(v *nv) int64 { return v.c.RosterExpired }),
		},
		rejected: prometheus.NewDesc("cmbnode_cmbs_rejected_total", "Rejected records and handshakes, by reason.", []string{"reason"}, nil),
		mesh: []scalar[ms]{
			gauge("cmbnode_peers", "Handshaken peers of the group.", func(s *ms) int64 { return int64(s.Peers) }),
			gauge("cmbnode_pending_parents", "Missing parents waiting to be fetched.", func(s *ms) int64 { return int64(s.PendingParents) }),
			counter("cmbnode_handshakes_total", "Completed /mmp/1.1.0 handshakes.", func(s *ms) int64 { return s.Handshakes }),
			counter("cmbnode_handshakes_failed_total", "Refused or failed handshakes.", func(s *ms) int64 { return s.HandshakesFailed }),
			counter("cmbnode_group_mismatches_total", "Handshakes from peers of another group.", func(s *ms) int64 { return s.GroupMismatches }),
			counter("cmbnode_group_proofs_failed_total", "Peers refused for a missing, malformed or wrong membership proof of the private group.", func(s *ms) int64 { return s.ProofsFailed }),
			counter("cmbnode_group_epochs_expired_total", "Sessions ended because their group secret epoch was superseded longer than rotation_grace ago.", func(s *ms) int64 { return s.EpochsExpired }),
			counter("cmbnode_gossip_published_total", "Records published on the group topic.", func(s *ms) int64 { return s.Published }),
			counter("cmbnode_gossip_unadmitted_total", "Gossip from peers not handshaken into the group, ignored.", func(s *ms) int64 { return s.GossipUnadmitted }),
			counter("cmbnode_fetches_served_total", "Fetch requests served to peers.", func(s *ms) int64 { return s.FetchesServed }),
			counter("cmbnode_catchup_rounds_total", "Catch-up reconciliations run.", func(s *ms) int64 { return s.CatchUpRounds }),
			counter("cmbnode_serve_throttled_total", "Fetch and catch-up answers held back because their peer had used its bytes-per-second budget.", func(s *ms) int64 { return s.ServeThrottled }),
			counter("cmbnode_serve_truncated_total", "Fetch and catch-up answers cut at a per-request cap; the requester asks again for the rest.", func(s *ms) int64 { return s.ServeTruncated }),
			counter("cmbnode_served_bytes_total", "Bytes of fetch and catch-up answers sent to peers.", func(s *ms) int64 { return s.ServedBytes }),
			counter("cmbnode_peerinfo_dials_total", "Dials started for peers learned from peer-info.", func(s *ms) int64 { return s.PeerInfoDials }),
			counter("cmbnode_peerinfo_dials_dropped_total", "Peers learned from peer-info not dialled because a bound was reached.", func(s *ms) int64 { return s.PeerInfoDialsDropped }),
			counter("cmbnode_gossip_resubscribes_total", "Members GossipSub had dropped from the topic while still connected, won back by reopening their gossip streams.", func(s *ms) int64 { return s.GossipResubscribes }),
			counter("cmbnode_peerstore_redials_total", "Remembered members reconnected at start from the peerstore file.", func(s *ms) int64 { return s.PeerstoreRedials }),
			counter("cmbnode_holepunch_attempts_total", "Hole-punch tries (DCUtR makes up to three per hole punch).", func(s *ms) int64 { return s.Reach.HolePunchAttempts }),
			counter("cmbnode_holepunch_successes_total", "Hole punches that ended with a direct connection.", func(s *ms) int64 { return s.Reach.HolePunchSuccesses }),
			counter("cmbnode_holepunch_failures_total", "Hole punches that ended without a direct connection (the peer stays relayed).", func(s *ms) int64 { return s.Reach.HolePunchFailures }),
			counter("cmbnode_relay_upgrades_total", "Peers moved from a relayed to a direct connection.", func(s *ms) int64 { return s.Reach.Upgrades }),
			counter("cmbnode_relay_reservations_total", "Relay reservations this node's relay service granted to members.", func(s *ms) int64 { return s.Reach.RelayReservations }),
			counter("cmbnode_relay_refused_total", "Relay reservations this node's relay service refused (not an admitted member).", func(s *ms) int64 { return s.Reach.RelayRefused }),
			gauge("cmbnode_relays_in_use", "Relays this node holds a reservation on.", func(s *ms) int64 { return int64(len(s.Reach.Relays)) }),
			gauge("cmbnode_gossip_mesh_peers", "Peers grafted into the GossipSub mesh of the group topic.", func(s *ms) int64 { return int64(s.GossipMesh) }),
			gauge("cmbnode_gossip_graylisted_peers", "Peers scoring below GossipSub's graylist threshold, whose RPCs are ignored.", func(s *ms) int64 { return int64(s.GossipGraylisted) }),
			counter("cmbnode_parent_fetches_total", "Missing-parent fetch attempts, one per key and retry round.", func(s *ms) int64 { return s.ParentFetches }),
		},
		pDropped: prometheus.NewDesc("cmbnode_pending_parents_dropped_total", "Missing parents given up, by reason (depth, full, author-cap, expired); catch-up brings what peers hold.", []string{"reason"}, nil),
		gDropped: prometheus.NewDesc("cmbnode_gossip_dropped_total", "Messages GossipSub discarded under load, by reason; catch-up recovers them.", []string{"reason"}, nil),
		piLimit:  prometheus.NewDesc("cmbnode_peerinfo_dials_limited_total", "Peers learned from peer-info not dialled, by the bound that refused them (docs/mesh.md, Limits).", []string{"bound"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.node {
		ch <- s.desc
	}
	ch <- c.rejected
	if c.m == nil {
		return
	}
	for _, s := range c.mesh {
		ch <- s.desc
	}
	ch <- c.gDropped
	ch <- c.piLimit
	ch <- c.pDropped
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	v := nodeView{c: c.n.Counters.Snapshot(), cmbs: c.n.Count(), dropped: c.n.Events().Dropped()}
	for _, s := range c.node {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, float64(s.get(&v)))
	}
	for reason, n := range v.c.Rejected {
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(n), reason)
	}
	if c.m == nil {
		return
	}
	ms := c.m.Stats()
	for _, s := range c.mesh {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, float64(s.get(&ms)))
	}
	for reason, n := range ms.GossipDropped {
		ch <- prometheus.MustNewConstMetric(c.gDropped, prometheus.CounterValue, float64(n), reason)
	}
	for bound, n := range ms.PeerInfoDialsLimited {
		ch <- prometheus.MustNewConstMetric(c.piLimit, prometheus.CounterValue, float64(n), bound)
	}
	for reason, n := range ms.PendingDropped {
		ch <- prometheus.MustNewConstMetric(c.pDropped, prometheus.CounterValue, float64(n), reason)
	}
}

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve listens on addr (e.g. "127.0.0.1:9464") and serves h at every path.
// Close stops it and waits for the serving goroutine.
func Serve(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	s := &Server{
		srv: &http.Server{
			Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
		},
		ln: ln, done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("metrics endpoint stopped", "addr", addr, "err", err)
		}
	}()
	return s, nil
}

// Addr is the address actually listened on (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close shuts the endpoint down, giving in-flight scrapes a moment.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
