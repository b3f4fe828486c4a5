package mesh

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/cmbnode/cmbnode/cmb"
)

// What a peer may draw from this node's fetch and catch-up service. A
// request is a few hundred bytes and its answer up to a frame, so without
// bounds a peer asking over and over turns this node into an amplifier:
// each answer is capped (digestPage, keysPage, maxFetchKeys,
// recordsBudget), and the answers one peer receives are paced to
// Config.ServeRate bytes a second with a burst of one full frame. An answer
// over the pace waits; while it waits it holds one of the session's
// serveParallel slots, so a peer that keeps asking stops being read (its
// stream's flow control pushes back) and only it is slowed: gossip, other
// peers' sessions and this node's own requests go on.
const (
	// DefaultServeRate is Config.ServeRate's default: bytes of answers a
	// second per peer. An honest late joiner pulls about 1 KB a record, so
	// this is some 4,000 records a second from each peer.
	DefaultServeRate = 4 << 20
	serveBurst       = cmb.MaxFrameSize
)

// serveBudget is the pace of one peer's answers, kept with its peerState
// (every session of a connected peer shares it); nil once the peer has
// gone, when nothing more is sent to it.
func (m *Mesh) serveBudget(pid peer.ID) *rate.Limiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps, ok := m.peers[pid]
	if !ok {
		return nil
	}
	if ps.budget == nil {
		ps.budget = rate.NewLimiter(rate.Limit(m.cfg.ServeRate), serveBurst)
	}
	return ps.budget
}

// answer sends p, an answer to the session's peer, once the peer's budget
// allows it; a wait is counted (cmbnode_serve_throttled_total).
func (ss *session) answer(ctx context.Context, p []byte) {
	lim := ss.m.serveBudget(ss.pid)
	if lim == nil {
		return
	}
	now := time.Now()
	r := lim.ReserveN(now, min(len(p), serveBurst))
	if d := r.DelayFrom(now); d > 0 {
		ss.m.stats.serveThrottled.Add(1)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			r.Cancel()
			return
		case <-ss.done:
			r.Cancel()
			return
		}
	}
	ss.m.stats.servedBytes.Add(int64(len(p)))
	_ = ss.sendRaw(p)
}
