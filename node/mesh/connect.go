package mesh

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

const (
	dialTimeout = 10 * time.Second // MMP's TCP connect bound
	// openerGrace is how long the larger PeerID waits for the smaller one to
	// open the /mmp stream before opening its own. Both may end up open; the
	// peer is then served by two sessions, which is harmless.
	openerGrace = 2 * time.Second
	// mismatchHold keeps a peer of another group from being re-dialled.
	mismatchHold = 10 * time.Minute

	// Peer-info dial bounds besides the budgets (peerinfo.go). Every
	// advertised address could cost a dial and every dial a goroutine, and
	// a peer-info frame is up to 1 MiB of addresses a peer may invent, so:
	// at most peerInfoAddrs addresses per advertised peer, and at most
	// peerInfoSlots such dials running at once in the whole mesh.
	peerInfoAddrs = 8
	peerInfoSlots = 16
)

// Connection-manager tags. Members are tagged, not protected: above
// ConnHigh the connection manager may trim one (GossipSub's own tags keep
// its mesh peers), and the member stays reachable through the others.
// Peers this node was told to keep (bootstrap, relays, `connect`) are
// protected, so the way into the group is never trimmed.
const (
	memberTag      = "mmp-member"
	memberTagValue = 10
	protectKept    = "mmp-kept"
	protectConnect = "mmp-connect"
)

// reserveMemberDial takes a place for a dial to a member learned from
// peer-info or the peerstore, if members connected plus such dials
// running are below PeerTarget; releaseMemberDial gives it back. m.mu held.
func (m *Mesh) reserveMemberDial() bool {
	if len(m.peers)+m.memberDials >= m.cfg.PeerTarget {
		return false
	}
	m.memberDials++
	return true
}

func (m *Mesh) releaseMemberDial() {
	m.mu.Lock()
	m.memberDials--
	m.mu.Unlock()
}

// atPeerTarget reports whether PeerTarget members are connected.
func (m *Mesh) atPeerTarget() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.peers) >= m.cfg.PeerTarget
}

// onConnected makes sure a new connection gets an /mmp session. MMP says the
// smaller identity dials; libp2p has already dialled, so the smaller PeerID
// opens the stream and the other side steps in only if none appears.
func (m *Mesh) onConnected(_ network.Network, c network.Conn) {
	pid := c.RemotePeer()
	if m.ctx.Err() != nil {
		return
	}
	if isRelayed(c) {
		m.goRun(func(ctx context.Context) { m.dedupeRelayed(ctx, pid) })
	}
	if !isRelayed(c) && m.onlyRelayed(pid) {
		m.goRun(func(ctx context.Context) { m.upgradeToDirect(ctx, pid) })
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
	// The best connection is used: a direct or unlimited one when there is
	// one. A limited relayed connection (a relay outside the group, with
	// libp2p's default limits) is accepted only when it is all there is;
	// GossipSub then stays off for this peer, fetch and catch-up still run.
	s, err := m.h.NewStream(network.WithAllowLimitedConn(sctx, "mmp"), pid, ProtocolID)
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
	r, ok := m.mismatch[pid]
	if ok && time.Now().After(r.until) {
		delete(m.mismatch, pid)
		return false
	}
	return ok
}

// markMismatched refuses pid for mismatchHold: reason is one of the
// refused* constants, grp the group its handshake named (refusedGroup).
func (m *Mesh) markMismatched(pid peer.ID, reason, grp string) {
	if len(grp) > maxShownGroup {
		grp = grp[:maxShownGroup] + "…"
	}
	now := time.Now()
	m.mu.Lock()
	if len(m.mismatch) >= maxRefused {
		for id, r := range m.mismatch {
			if now.After(r.until) {
				delete(m.mismatch, id)
			}
		}
	}
	m.mismatch[pid] = refusal{until: now.Add(mismatchHold), reason: reason, group: grp}
	m.mu.Unlock()
}

// clearRefusal ends pid's hold: it presented a handshake that passed (it
// moved to our group, or got the secret), so the earlier refusal no
// longer says anything about it.
func (m *Mesh) clearRefusal(pid peer.ID) {
	m.mu.Lock()
	delete(m.mismatch, pid)
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

// dialAdvertised dials a peer that adv advertised (in peer-info, or mDNS
// under mdnsAdvertiser), unless it is
// us, connected, of another group or already being dialled, and only if a
// mesh-wide slot is free and the advertiser's and the mesh's budgets
// (dialBudget) have a dial left for it: a member's budget when it
// completed a handshake here before, a stranger's otherwise. Nothing is
// dialled while PeerTarget members are connected or being dialled: the
// advertised peer is reached through the members we have (bound
// "target", not counted as dropped: it is the partial mesh working).
func (m *Mesh) dialAdvertised(adv peer.ID, ai peer.AddrInfo) {
	if ai.ID == m.h.ID() || m.h.Network().Connectedness(ai.ID) == network.Connected || m.isMismatched(ai.ID) {
		return
	}
	m.mu.Lock()
	if m.peerInfoDialing[ai.ID] {
		m.mu.Unlock()
		return
	}
	if !m.reserveMemberDial() {
		m.mu.Unlock()
		m.peerInfoBudget.refuse(boundTarget)
		return
	}
	select {
	case m.peerInfoSlots <- struct{}{}:
	default:
		m.memberDials--
		m.mu.Unlock()
		m.peerInfoBudget.refuse(boundSlots)
		m.stats.peerInfoDropped.Add(1)
		return
	}
	stranger := m.known == nil || !m.known.has(ai.ID)
	if bound := m.peerInfoBudget.take(adv, stranger, time.Now()); bound != "" {
		<-m.peerInfoSlots
		m.memberDials--
		m.mu.Unlock()
		m.stats.peerInfoDropped.Add(1)
		m.log.Debug("advertised peer's dial refused", "advertiser", adv, "peer", ai.ID, "bound", bound)
		return
	}
	m.peerInfoDialing[ai.ID] = true
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		delete(m.peerInfoDialing, ai.ID)
		m.memberDials--
		m.mu.Unlock()
		<-m.peerInfoSlots
	}
	started := m.goRun(func(ctx context.Context) {
		defer release()
		if h := m.cfg.peerInfoDialHook; h != nil {
			defer h(ai)()
		}
		// Peer-info often reaches both ends of a pair at once (each is
		// told of the other). Two dials through a relay would give two
		// relayed connections, each side the receiving end of one, and
		// two hole punches that cross and fail: as for /mmp sessions, the
		// smaller PeerID dials and the larger steps in only if nothing
		// came within openerGrace.
		if m.h.ID() > ai.ID {
			select {
			case <-ctx.Done():
				return
			case <-time.After(openerGrace):
			}
		}
		// A member reached through a relay may not hold its slot yet when
		// it is announced: one retry after a moment covers that race.
		ai := m.withCircuits(ai)
		for try := range 2 {
			err := m.connect(ctx, ai)
			if err == nil {
				return
			}
			m.log.Debug("peer-info dial failed", "peer", ai.ID, "try", try+1, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	})
	if !started {
		release()
		return
	}
	m.stats.peerInfoDials.Add(1)
}

// keepDialled keeps a bootstrap peer or relay connected, re-dialling with
// jittered exponential backoff (1 s doubling to RetryMax) while it is
// unreachable. A peer refused at the handshake is not dialled while the
// refusal holds; it is re-checked every few seconds, since a handshake
// that passes ends the hold early (clearRefusal).
func (m *Mesh) keepDialled(ctx context.Context, ai peer.AddrInfo, k *kept) {
	backoff := time.Second
	for {
		wait := 5 * time.Second // re-check a healthy connection, or a refusal, this often
		switch {
		case m.isMismatched(ai.ID):
		case m.h.Network().Connectedness(ai.ID) == network.Connected:
			backoff = time.Second
			m.dialSucceeded(k)
		default:
			if err := m.connect(ctx, ai); err != nil {
				if ctx.Err() != nil {
					return
				}
				m.dialFailed(k, backoff, err)
				wait = backoff + rand.N(backoff/2+1)
				backoff = min(backoff*2, m.cfg.RetryMax)
			} else {
				backoff = time.Second
				m.dialSucceeded(k)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// redialKnown dials a member remembered in the peerstore, with the backoff
// of keepDialled, until it is connected once or knownAttempts dials
// failed: a peer that moved or left is not dialled forever. Once
// connected, sessions and peer-info keep it, as for any other peer. It
// stops once PeerTarget members are connected, and dials only with a
// place under it (reserveMemberDial), waiting while the places are held
// by other dials: a node with hundreds remembered does not redial them all.
func (m *Mesh) redialKnown(ctx context.Context, ai peer.AddrInfo) {
	backoff := time.Second
	for tries := 0; tries < knownAttempts; {
		if m.isMismatched(ai.ID) || m.h.Network().Connectedness(ai.ID) == network.Connected || m.atPeerTarget() {
			return
		}
		m.mu.Lock()
		placed := m.reserveMemberDial()
		m.mu.Unlock()
		if !placed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second + rand.N(time.Second)):
			}
			continue
		}
		tries++
		err := m.connect(ctx, m.withCircuits(ai))
		m.releaseMemberDial()
		if err == nil {
			m.stats.knownRedialed.Add(1)
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Debug("peerstore dial failed", "peer", ai.ID, "retryIn", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + rand.N(backoff/2+1)):
		}
		backoff = min(backoff*2, m.cfg.RetryMax)
	}
}

// withCircuits adds circuit addresses through our relays to ai's, so a
// member behind a NAT is reached through a relay we share.
func (m *Mesh) withCircuits(ai peer.AddrInfo) peer.AddrInfo {
	out := peer.AddrInfo{ID: ai.ID, Addrs: append([]ma.Multiaddr(nil), ai.Addrs...)}
	for _, a := range m.circuitAddrsFor(ai.ID) {
		if !isCircuit(a) || slices.ContainsFunc(out.Addrs, a.Equal) {
			continue
		}
		out.Addrs = append(out.Addrs, a)
	}
	return out
}

type mdnsNotifee struct{ m *Mesh }

// HandlePeerFound dials a peer mDNS found; the handshake decides whether it
// belongs to our group. An mDNS answer is anyone on the LAN's word, as a
// peer-info entry is a peer's: it is dialled on the same terms
// (dialAdvertised), under one advertiser of its own (mdnsAdvertiser), so a
// host announcing thousands of identities gets a few dials a minute and
// holds at most the mesh's dial slots.
func (n mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	m := n.m
	if ai.ID == m.h.ID() || m.ctx.Err() != nil {
		return
	}
	m.dialAdvertised(mdnsAdvertiser, ai)
}

// mdnsAdvertiser is the advertiser mDNS answers are budgeted under; not a
// valid PeerID, so no peer's own budget is it.
const mdnsAdvertiser = peer.ID("mdns")
