package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/store"
)

// Limits bound what peers can make this node spend on admission and the
// roster (docs/mesh.md "Limits"). The zero value is the defaults.
type Limits struct {
	// MaxFutureSkew refuses a received record dated more than this after
	// this node's clock (default 1 h).
	MaxFutureSkew time.Duration
	// AuthorRate (records/s) and AuthorBurst bound the new records one
	// author may have admitted here (default 100/s, burst 20,000, so a
	// burst of 20,000 records authored at once still reaches every
	// member); records over it are refused (ReasonAuthorRate) and
	// catch-up brings them later.
	AuthorRate  float64
	AuthorBurst int
	// RosterIdleTTL expires a roster entry whose nodeId authored no stored
	// record and that was not seen for this long (default 7 days);
	// RosterMaxIdle caps such entries (default 1,024), expiring the least
	// recently seen first. Entries of connected peers, this node's own and
	// trusted ones never expire.
	RosterIdleTTL time.Duration
	RosterMaxIdle int
}

// DefaultLimits are the limits a node runs with when none are set.
func DefaultLimits() Limits {
	return Limits{
		MaxFutureSkew: time.Hour,
		AuthorRate:    100,
		AuthorBurst:   20000,
		RosterIdleTTL: 7 * 24 * time.Hour,
		RosterMaxIdle: 1024,
	}
}

func (l *Limits) defaults() {
	def := DefaultLimits()
	opt.Default(&l.MaxFutureSkew, def.MaxFutureSkew)
	opt.Default(&l.AuthorRate, def.AuthorRate)
	opt.Default(&l.AuthorBurst, def.AuthorBurst)
	opt.Default(&l.RosterIdleTTL, def.RosterIdleTTL)
	opt.Default(&l.RosterMaxIdle, def.RosterMaxIdle)
}

// Reasons of the admission limits' refusals, named like cmb's so they show
// alike in logs and in cmbnode_cmbs_rejected_total{reason}.
const (
	ReasonFutureTimestamp cmb.Reason = "future-timestamp"
	ReasonAuthorRate      cmb.Reason = "author-rate"
)

// ErrFutureTimestamp and ErrAuthorRate match (errors.Is) the refusals of a
// record dated too far ahead and of one over its author's quota. Both rest
// on this node's clock and counts, not on the record alone: they are local
// verdicts (IsLocalVerdict), no evidence against a relay.
var (
	ErrFutureTimestamp = &cmb.Error{Reason: ReasonFutureTimestamp}
	ErrAuthorRate      = &cmb.Error{Reason: ReasonAuthorRate}
)

// checkFuture refuses a record dated more than MaxFutureSkew ahead. It
// costs nothing and writes nothing, so it runs before the signature.
func (n *Node) checkFuture(rec *cmb.Record) error {
	now := n.now()
	if ahead := time.Duration(rec.CreatedAt-now.UnixMilli()) * time.Millisecond; ahead > n.limits.MaxFutureSkew {
		return &cmb.Error{Reason: ReasonFutureTimestamp,
			Detail: fmt.Sprintf("record is dated %s ahead of this node's clock, more than the %s allowed", ahead.Round(time.Second), n.limits.MaxFutureSkew),
			Err:    errLocalState}
	}
	return nil
}

// maxQuotaAuthors bounds the authors whose quota is tracked. Past it, the
// authors whose bucket has refilled are forgotten first (a full bucket is
// what a new author gets, so nothing is lost); if none has, the least
// recently charged goes.
const maxQuotaAuthors = 8192

// quotas are the per-author token buckets of admitted records.
type quotas struct {
	mu    sync.Mutex
	lim   rate.Limit
	burst int
	by    map[string]*quota
}

type quota struct {
	l    *rate.Limiter
	last time.Time
}

func newQuotas(l Limits) *quotas {
	return &quotas{lim: rate.Limit(l.AuthorRate), burst: l.AuthorBurst, by: map[string]*quota{}}
}

// allow charges one record to author at now, reporting whether it was
// within the author's quota.
func (q *quotas) allow(author string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.by[author]
	if !ok {
		if len(q.by) >= maxQuotaAuthors {
			q.evict(now)
		}
		e = &quota{l: rate.NewLimiter(q.lim, q.burst)}
		q.by[author] = e
	}
	e.last = now
	return e.l.AllowN(now, 1)
}

func (q *quotas) evict(now time.Time) {
	var oldest string
	var at time.Time
	for a, e := range q.by {
		if e.l.TokensAt(now) >= float64(q.burst) {
			delete(q.by, a)
			continue
		}
		if oldest == "" || e.last.Before(at) {
			oldest, at = a, e.last
		}
	}
	if len(q.by) >= maxQuotaAuthors {
		delete(q.by, oldest)
	}
}

// checkQuota charges a new record that arrived by gossip to its author's
// quota: gossip is what a member floods the group through, pushing records
// nobody asked for. Records this node pulled (a lineage fetch, catch-up)
// come at its own pace and within the bounds of those paths, so a node
// that joins a group whose authors hold tens of thousands of records
// catches up at full speed; records authored here, and imported ones (this
// node's own memory restored), are never charged.
func (n *Node) checkQuota(rec *cmb.Record, src Source) error {
	if src.Via != SourceGossip || strings.EqualFold(rec.CreatedBy, n.id.NodeID) {
		return nil
	}
	if n.quotas.allow(strings.ToLower(rec.CreatedBy), n.now()) {
		return nil
	}
	return &cmb.Error{Reason: ReasonAuthorRate,
		Detail: fmt.Sprintf("author %s is over its quota of %g records/s (burst %d)", cmb.Truncate(rec.CreatedBy, 64), n.limits.AuthorRate, n.limits.AuthorBurst),
		Err:    errLocalState}
}

// rosterPrune runs PruneRoster once every rosterPruneEvery new roster
// entries (an eighth of the cap), so the cap holds between the daemon's
// periodic prunes however fast handshakes come.
type rosterPrune struct {
	added   atomic.Int64
	running atomic.Bool
}

func (n *Node) rosterPruneEvery() int64 { return int64(max(1, n.limits.RosterMaxIdle/8)) }

// rosterAdded notes a new roster entry and prunes when enough have come.
func (n *Node) rosterAdded(ctx context.Context) {
	if n.prune.added.Add(1) < n.rosterPruneEvery() || !n.prune.running.CompareAndSwap(false, true) {
		return
	}
	defer n.prune.running.Store(false)
	n.prune.added.Store(0)
	if _, err := n.PruneRoster(ctx); err != nil && ctx.Err() == nil {
		n.log.Warn("pruning the roster failed", "err", err)
	}
}

// PruneRoster expires roster entries of nodeIds that authored no stored
// record: those not seen for RosterIdleTTL, then the least recently seen
// beyond RosterMaxIdle. A pin protects the records its key signed; with
// none stored it protects nothing, and a handshake pins it afresh. Entries
// of connected peers, this node's own and trusted ones are kept. It
// returns how many it expired.
func (n *Node) PruneRoster(ctx context.Context) (int, error) {
	peers, err := n.st.Peers(ctx)
	if err != nil {
		return 0, fmt.Errorf("pruning the roster: %w", err)
	}
	connected := map[string]bool{}
	if m := n.getMesh(); m != nil {
		for _, p := range m.Peers() {
			connected[strings.ToLower(p.NodeID)] = true
		}
	}
	self := strings.ToLower(n.id.NodeID)
	var idle []store.Peer
	for _, p := range peers {
		if p.NodeID == self || p.Trusted || connected[p.NodeID] {
			continue
		}
		authored := false
		err := n.st.Scan(ctx, store.Window{Author: p.NodeID, Limit: 1}, func(store.KeyTime) error {
			authored = true
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("pruning the roster: %w", err)
		}
		if !authored {
			idle = append(idle, p)
		}
	}
	// Most recently seen first: the tail beyond the cap, and anything
	// unseen for the TTL, goes.
	slices.SortFunc(idle, func(a, b store.Peer) int { return b.LastSeen.Compare(a.LastSeen) })
	cutoff := n.now().Add(-n.limits.RosterIdleTTL)
	var expire []string
	for i, p := range idle {
		if i >= n.limits.RosterMaxIdle || p.LastSeen.Before(cutoff) {
			expire = append(expire, p.NodeID)
		}
	}
	if len(expire) == 0 {
		return 0, nil
	}
	if err := n.st.DeletePeers(ctx, expire); err != nil {
		return 0, fmt.Errorf("pruning the roster: %w", err)
	}
	n.Counters.RosterExpired.Add(int64(len(expire)))
	n.log.Info("expired roster entries of peers that authored nothing stored", "expired", len(expire), "idle", len(idle)-len(expire))
	return len(expire), nil
}
