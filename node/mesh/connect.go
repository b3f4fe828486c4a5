package mesh

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

const (
	dialTimeout = 10 * time.Second // MMP's TCP connect bound
	// openerGrace is how long the larger PeerID waits for the smaller one to
	// open the /mmp stream before opening its own. Both may end up open; the
	// peer is then served by two sessions, which is harmless.
	openerGrace = 2 * time.Second
	// mismatchHold keeps a peer of another group from being re-dialled.
	mismatchHold = 10 * time.Minute

	// Peer-info dial bounds. Every advertised address could cost a dial and
	// every dial a goroutine, and a peer-info frame is up to 1 MiB of
	// addresses a peer may invent, so: at most peerInfoAddrs addresses per
	// advertised peer; at most peerInfoBudget advertised peers dialled per
	// session per peerInfoWindow; at most peerInfoSlots such dials running
	// at once in the whole mesh. What exceeds a bound is dropped, not
	// queued: honest peers re-send peer-info on every new session.
	peerInfoAddrs  = 8
	peerInfoBudget = 64
	peerInfoWindow = time.Minute
	peerInfoSlots  = 16
)

// onConnected makes sure a new connection gets an /mmp session. MMP says the
// smaller identity dials; libp2p has already dialled, so the smaller PeerID
// opens the stream and the other side steps in only if none appears.
func (m *Mesh) onConnected(_ network.Network, c network.Conn) {
	pid := c.RemotePeer()
	if m.ctx.Err() != nil {
		return
	}
	m.goRun(func(ctx context.Context) {
		if m.h.ID() > pid {
			select {
			case <-ctx.Done():
				return
			case <-time.After(openerGrace):
			}
		}
		if m.sessionFor(pid) != nil || m.h.Network().Connectedness(pid) != network.Connected || m.isMismatched(pid) {
			return
		}
		m.openSession(ctx, pid)
	})
}

func (m *Mesh) openSession(ctx context.Context, pid peer.ID) {
	m.mu.Lock()
	if m.dialing[pid] {
		m.mu.Unlock()
		return
	}
	m.dialing[pid] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.dialing, pid)
		m.mu.Unlock()
	}()
	sctx, cancel := context.WithTimeout(ctx, dialTimeout)
	s, err := m.h.NewStream(sctx, pid, ProtocolID)
	cancel()
	if err != nil {
		m.log.Debug("opening mmp stream failed", "peer", pid, "err", err)
		return
	}
	m.runSession(ctx, s, true)
}

func (m *Mesh) handleStream(s network.Stream) {
	if m.ctx.Err() != nil {
		s.Reset()
		return
	}
	m.goRun(func(ctx context.Context) { m.runSession(ctx, s, false) })
}

func (m *Mesh) isMismatched(pid peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.mismatch[pid]
	if ok && time.Now().After(until) {
		delete(m.mismatch, pid)
		return false
	}
	return ok
}

func (m *Mesh) markMismatched(pid peer.ID) {
	m.mu.Lock()
	m.mismatch[pid] = time.Now().Add(mismatchHold)
	m.mu.Unlock()
}

// connect dials a peer unless already connected or known to be of another group.
func (m *Mesh) connect(ctx context.Context, ai peer.AddrInfo) error {
	if ai.ID == m.h.ID() || m.isMismatched(ai.ID) {
		return nil
	}
	if m.h.Network().Connectedness(ai.ID) == network.Connected {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return m.h.Connect(dctx, ai)
}

// dialAdvertised dials a peer that ss's peer-info advertised, unless it is
// us, connected, of another group or already being dialled, and only if a
// mesh-wide slot is free and the session's budget for the window is left.
func (m *Mesh) dialAdvertised(ss *session, ai peer.AddrInfo) {
	if ai.ID == m.h.ID() || m.h.Network().Connectedness(ai.ID) == network.Connected || m.isMismatched(ai.ID) {
		return
	}
	m.mu.Lock()
	if m.peerInfoDialing[ai.ID] {
		m.mu.Unlock()
		return
	}
	select {
	case m.peerInfoSlots <- struct{}{}:
	default:
		m.mu.Unlock()
		m.stats.peerInfoDropped.Add(1)
		return
	}
	if now := time.Now(); now.Sub(ss.peerInfoSince) >= peerInfoWindow {
		ss.peerInfoSince, ss.peerInfoDials = now, 0
	}
	if ss.peerInfoDials >= peerInfoBudget {
		<-m.peerInfoSlots
		m.mu.Unlock()
		m.stats.peerInfoDropped.Add(1)
		return
	}
	ss.peerInfoDials++
	m.peerInfoDialing[ai.ID] = true
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		delete(m.peerInfoDialing, ai.ID)
		m.mu.Unlock()
		<-m.peerInfoSlots
	}
	started := m.goRun(func(ctx context.Context) {
		defer release()
		if h := m.cfg.peerInfoDialHook; h != nil {
			defer h(ai)()
		}
		if err := m.connect(ctx, ai); err != nil {
			m.log.Debug("peer-info dial failed", "peer", ai.ID, "err", err)
		}
	})
	if !started {
		release()
		return
	}
	m.stats.peerInfoDials.Add(1)
}

// keepDialled keeps a bootstrap peer connected, re-dialling with jittered
// exponential backoff (1 s doubling to RetryMax) while it is unreachable.
func (m *Mesh) keepDialled(ctx context.Context, ai peer.AddrInfo) {
	backoff := time.Second
	for {
		wait := 5 * time.Second // re-check a healthy connection this often
		switch {
		case m.isMismatched(ai.ID):
			wait = mismatchHold
		case m.h.Network().Connectedness(ai.ID) == network.Connected:
			backoff = time.Second
		default:
			if err := m.connect(ctx, ai); err != nil {
				if ctx.Err() != nil {
					return
				}
				m.log.Debug("bootstrap dial failed", "peer", ai.ID, "retryIn", backoff, "err", err)
				wait = backoff + rand.N(backoff/2+1)
				backoff = min(backoff*2, m.cfg.RetryMax)
			} else {
				backoff = time.Second
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

type mdnsNotifee struct{ m *Mesh }

// HandlePeerFound dials a peer mDNS found; the handshake decides whether it
// belongs to our group.
func (n mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	m := n.m
	if ai.ID == m.h.ID() || m.ctx.Err() != nil {
		return
	}
	m.goRun(func(ctx context.Context) {
		if err := m.connect(ctx, ai); err != nil {
			m.log.Debug("mdns peer dial failed", "peer", ai.ID, "err", err)
		}
	})
}
