package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// Reachability settings and states (status shows the state).
const (
	// ReachAuto lets AutoNAT (v1 and v2, answered by other members) decide.
	ReachAuto = "auto"
	// ReachPublic: other members can dial this node's addresses.
	ReachPublic = "public"
	// ReachPrivate: this node is behind a NAT or firewall; it reserves a
	// slot on its relays at once and is reached through them until a hole
	// punch gives a direct connection.
	ReachPrivate = "private"
	// ReachUnknown: AutoNAT has not decided (too few members answered).
	ReachUnknown = "unknown"
)

// Conn kinds of a peer (PeerInfo.Conn).
const (
	ConnDirect  = "direct"
	ConnRelayed = "relayed"
	ConnBoth    = "direct+relayed"
)

const (
	// relayBackoff is how long AutoRelay waits before asking a relay that
	// refused a reservation again (libp2p's default is an hour: a member
	// refused because its proof was still in flight would wait that long).
	relayBackoff = 20 * time.Second
	// relayPoll is how often AutoRelay looks at the static relays again
	// when it holds fewer reservations than relays.
	relayPoll = 5 * time.Second
	// announceDelay lets a relay record a reservation it just allowed
	// before it tells the other members the reserving peer is reachable.
	announceDelay = 200 * time.Millisecond
	// upgradeWait bounds the wait for a session on a new direct
	// connection before the relayed connections to that peer are closed.
	upgradeWait = 15 * time.Second
)

// RelayStartError: the relay service could not start.
type RelayStartError struct{ Err error }

func (e *RelayStartError) Error() string { return "start the relay service: " + e.Err.Error() }
func (e *RelayStartError) Unwrap() error { return e.Err }

// reachState holds what the reach features count and observe.
type reachState struct {
	mu           sync.Mutex
	reachability network.Reachability

	hpAttempts, hpSuccesses, hpFailures atomic.Int64
	rsvpAllowed, rsvpRefused            atomic.Int64
	upgrades                            atomic.Int64
}

// hpTracer counts hole punches (holepunch.EventTracer). libp2p calls it on
// its own goroutines; it only bumps counters.
type hpTracer struct{ m *Mesh }

func (t hpTracer) Trace(evt *holepunch.Event) {
	r := &t.m.reach
	switch e := evt.Evt.(type) {
	case *holepunch.HolePunchAttemptEvt:
		r.hpAttempts.Add(1)
	case *holepunch.EndHolePunchEvt:
		if e.Success {
			r.hpSuccesses.Add(1)
			t.m.log.Info("hole punch succeeded", "peer", evt.Remote, "took", e.EllapsedTime)
		} else {
			r.hpFailures.Add(1)
			t.m.log.Info("hole punch failed; staying relayed", "peer", evt.Remote, "err", e.Error)
		}
	}
}

// memberACL restricts the relay service to the group's members: a peer
// may reserve a slot, or open a circuit, only once its handshake (and, in
// a private group, its membership proof) has admitted it on a direct
// connection to us. A stranger gets PERMISSION_DENIED and no slot. The
// destination of a circuit must be admitted too, so the relay never
// carries traffic for anyone outside the group.
type memberACL struct{ m *Mesh }

func (a memberACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	ok := a.m.awaitAdmitted(p)
	if ok {
		a.m.reach.rsvpAllowed.Add(1)
		// The peer is reachable through us only once the slot is recorded,
		// just after we return: tell the other members then.
		a.m.goRun(func(ctx context.Context) {
			select {
			case <-ctx.Done():
			case <-time.After(announceDelay):
				a.m.announce(p)
			}
		})
	} else {
		a.m.reach.rsvpRefused.Add(1)
		a.m.log.Info("relay reservation refused: not an admitted member", "peer", p)
	}
	return ok
}

func (a memberACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dest peer.ID) bool {
	ok := a.m.awaitAdmitted(src) && a.m.admitted(dest)
	if !ok {
		a.m.log.Info("relay circuit refused: not between admitted members", "src", src, "dest", dest)
	}
	return ok
}

// awaitAdmitted reports whether pid is, or within the handshake's time
// becomes, an admitted peer. A member's reservation request and its /mmp
// handshake race on a fresh connection, so the relay waits for the
// verdict instead of refusing (which would cost the member relayBackoff).
// It gives up as soon as the peer disconnects or is refused.
func (m *Mesh) awaitAdmitted(pid peer.ID) bool {
	deadline := time.NewTimer(m.cfg.HandshakeTimeout + openerGrace + time.Second)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		_, ok := m.peers[pid]
		ch := m.admitCh
		m.mu.Unlock()
		switch {
		case ok:
			return true
		case m.isMismatched(pid) || m.h.Network().Connectedness(pid) != network.Connected:
			return false
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-m.ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond): // re-check the connection
		}
	}
}

// startRelay serves circuit relay v2 for members. Limits are infinite: the
// ACL already restricts it to the group, and a limited circuit would be
// useless to GossipSub, which opens no stream on one. Reservations stay
// bounded by libp2p's resources (128 slots, 8 per IP).
func (m *Mesh) startRelay() error {
	r, err := relayv2.New(m.h, relayv2.WithInfiniteLimits(), relayv2.WithACL(memberACL{m}))
	if err != nil {
		return &RelayStartError{Err: err}
	}
	m.relay = r
	return nil
}

// follow calls fn with each event of evt's type on the host's bus until
// ctx ends (what names the events in a failure's log line).
func (m *Mesh) follow(ctx context.Context, evt any, what string, fn func(any)) {
	sub, err := m.h.EventBus().Subscribe(evt)
	if err != nil {
		m.log.Warn("cannot follow "+what, "err", err)
		return
	}
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			fn(e)
		}
	}
}

// watchReachability follows libp2p's reachability events (AutoNAT, or the
// forced setting) for status.
func (m *Mesh) watchReachability(ctx context.Context) {
	m.follow(ctx, new(event.EvtLocalReachabilityChanged), "reachability", func(e any) {
		r := e.(event.EvtLocalReachabilityChanged).Reachability
		m.reach.mu.Lock()
		changed := m.reach.reachability != r
		m.reach.reachability = r
		m.reach.mu.Unlock()
		if changed {
			m.log.Info("reachability", "state", reachName(r))
		}
	})
}

func reachName(r network.Reachability) string {
	switch r {
	case network.ReachabilityPublic:
		return ReachPublic
	case network.ReachabilityPrivate:
		return ReachPrivate
	}
	return ReachUnknown
}

// Reach reports reachability, relays in use and hole-punch counts
// (node.Reacher).
func (m *Mesh) Reach() node.Reach {
	m.reach.mu.Lock()
	r := m.reach.reachability
	m.reach.mu.Unlock()
	out := node.Reach{
		Reachability: reachName(r), Forced: m.cfg.Reachability != ReachAuto, RelayService: m.relay != nil,
		Relays:            m.relaysInUse(),
		RelayReservations: m.reach.rsvpAllowed.Load(), RelayRefused: m.reach.rsvpRefused.Load(),
		HolePunchAttempts: m.reach.hpAttempts.Load(), HolePunchSuccesses: m.reach.hpSuccesses.Load(),
		HolePunchFailures: m.reach.hpFailures.Load(), Upgrades: m.reach.upgrades.Load(),
	}
	if out.Forced {
		out.Reachability = m.cfg.Reachability
	}
	return out
}

// relaysInUse are the relays our advertised circuit addresses go through:
// AutoRelay adds /p2p/<relay>/p2p-circuit addresses for each reservation
// it holds and removes them when the reservation ends.
func (m *Mesh) relaysInUse() []string {
	out := []string{}
	for _, a := range m.h.Addrs() {
		if !isCircuit(a) {
			continue
		}
		if id, err := a.ValueForProtocol(ma.P_P2P); err == nil && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// isCircuit reports whether a goes through a relay.
func isCircuit(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// isRelayed reports whether c runs through a relay.
func isRelayed(c network.Conn) bool { return isCircuit(c.RemoteMultiaddr()) }

// connKind says how pid is connected: ConnDirect, ConnRelayed, or
// ConnBoth while a peer moves from a relay to a direct connection; ""
// when no connection is open.
func (m *Mesh) connKind(pid peer.ID) string {
	direct, relayed := false, false
	for _, c := range m.h.Network().ConnsToPeer(pid) {
		if isRelayed(c) {
			relayed = true
		} else {
			direct = true
		}
	}
	switch {
	case direct && relayed:
		return ConnBoth
	case direct:
		return ConnDirect
	case relayed:
		return ConnRelayed
	}
	return ""
}

// onlyRelayed reports whether every session with pid runs over a relayed
// connection (false without sessions).
func (m *Mesh) onlyRelayed(pid peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps, ok := m.peers[pid]
	if !ok || len(ps.sessions) == 0 {
		return false
	}
	for _, ss := range ps.sessions {
		if !isRelayed(ss.s.Conn()) {
			return false
		}
	}
	return true
}

// upgradeToDirect moves a peer whose sessions run over relays onto the
// direct connection that just appeared (a hole punch, or a dial that got
// through): a new /mmp session is opened on it — a stream opened without
// WithAllowLimitedConn lands on the best connection, the direct one — and
// once it is admitted the relayed connections are closed, so GossipSub's
// streams move too and the relay carries nothing more for this pair. The
// peer stays admitted throughout (no peer-left). As in onConnected, the
// smaller PeerID opens and the larger one steps in only if none appears.
func (m *Mesh) upgradeToDirect(ctx context.Context, pid peer.ID) {
	if !m.onlyRelayed(pid) {
		return
	}
	if m.h.ID() > pid {
		select {
		case <-ctx.Done():
			return
		case <-time.After(openerGrace):
		}
		if !m.onlyRelayed(pid) {
			return // the other side moved us
		}
	}
	sctx, cancel := context.WithTimeout(ctx, dialTimeout)
	s, err := m.h.NewStream(network.WithNoDial(sctx, "upgrade to direct"), pid, ProtocolID)
	cancel()
	if err != nil {
		m.log.Debug("opening mmp stream on the direct connection failed", "peer", pid, "err", err)
		return
	}
	if isRelayed(s.Conn()) {
		_ = s.Reset()
		return
	}
	m.goRun(func(ctx context.Context) { m.runSession(ctx, s, true) })
	deadline := time.Now().Add(upgradeWait)
	for m.onlyRelayed(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil || m.connKind(pid) == ConnRelayed {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	closed := 0
	for _, c := range m.h.Network().ConnsToPeer(pid) {
		if isRelayed(c) {
			_ = c.Close()
			closed++
		}
	}
	if closed > 0 {
		m.reach.upgrades.Add(1)
		m.log.Info("peer moved to a direct connection", "peer", pid, "addr", s.Conn().RemoteMultiaddr().String(), "relayedClosed", closed)
	}
}

// relayAddrs are circuit addresses through the relays we hold a
// reservation on, for pid, and through us when we serve as a relay: where
// a member behind a NAT can be reached when its own addresses cannot.
func (m *Mesh) circuitAddrsFor(pid peer.ID) []ma.Multiaddr {
	var out []ma.Multiaddr
	add := func(relay peer.ID, relayAddrs []ma.Multiaddr) {
		for _, a := range relayAddrs {
			if isCircuit(a) {
				continue
			}
			c, err := ma.NewMultiaddr(fmt.Sprintf("/p2p/%s/p2p-circuit", relay))
			if err != nil {
				continue
			}
			out = append(out, a.Encapsulate(c))
			break // one address per relay is enough: it is a hint
		}
	}
	if m.relay != nil {
		add(m.h.ID(), m.h.Addrs())
	}
	for _, r := range m.staticRelays {
		if r.ID != pid && r.ID != m.h.ID() {
			add(r.ID, m.h.Peerstore().Addrs(r.ID))
		}
	}
	return out
}

// announce tells every other admitted peer about pid (a peer-info frame of
// one entry): a member that joins, or reserves a slot on us, after the
// others' sessions began would otherwise be known only to those it dials.
func (m *Mesh) announce(pid peer.ID) {
	var f *cmb.PeerInfo
	for _, pi := range m.Peers() {
		if pi.PeerID == pid.String() {
			f = &cmb.PeerInfo{Peers: []cmb.PeerEntry{m.entryFor(pi)}}
		}
	}
	if f == nil {
		return
	}
	for _, ss := range m.sessions("") {
		if ss.pid != pid {
			_ = ss.send(f)
		}
	}
}

// ConnectError is a failed Connect: Stage "address" (not a multiaddr
// naming a peer; matches node.ErrBadRequest), "dial" (no connection;
// node.ErrUnavailable) or "admission" (connected, but the handshake or
// membership proof failed or did not finish in time; node.ErrRejected).
type ConnectError struct {
	Addr  string
	Stage string
	Err   error
}

func (e *ConnectError) Error() string {
	switch e.Stage {
	case "address":
		return fmt.Sprintf("connect %s: %v (want a multiaddr ending in /p2p/<peerId>, as cmbnode status shows it)", e.Addr, e.Err)
	case "dial":
		return fmt.Sprintf("connect %s: dial failed: %v", e.Addr, e.Err)
	}
	return fmt.Sprintf("connect %s: %v", e.Addr, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Is maps the stage onto the node's error kinds, which the socket turns
// into its codes.
func (e *ConnectError) Is(target error) bool {
	switch e.Stage {
	case "address":
		return target == node.ErrBadRequest
	case "dial":
		return target == node.ErrUnavailable
	}
	return target == node.ErrRejected
}

// errNotAdmitted: connected, but no admission followed.
var errNotAdmitted = errors.New("the peer did not pass the handshake and membership proof (another group, no valid proof of this group's secret, or no answer in time)")

// errRefusedRecently: the peer was refused within mismatchHold.
var errRefusedRecently = errors.New("the peer was refused in the last 10 minutes (another group, or no valid membership proof); see the daemon's log")

// Connect dials addr (a multiaddr ending in /p2p/<peerId>, a circuit
// address included) and returns once the peer is admitted (node.Connector).
// An admitted peer is returned at once.
func (m *Mesh) Connect(ctx context.Context, addr string) (node.PeerInfo, error) {
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return node.PeerInfo{}, &ConnectError{Addr: addr, Stage: "address", Err: err}
	}
	if ai.ID == m.h.ID() {
		return node.PeerInfo{}, &ConnectError{Addr: addr, Stage: "address", Err: errors.New("that is this node")}
	}
	if m.isMismatched(ai.ID) {
		return node.PeerInfo{}, &ConnectError{Addr: addr, Stage: "admission", Err: errRefusedRecently}
	}
	// A peer the operator asked for is kept whatever PeerTarget says.
	m.h.ConnManager().Protect(ai.ID, protectConnect)
	if !m.admitted(ai.ID) {
		if err := m.connect(ctx, *ai); err != nil {
			return node.PeerInfo{}, &ConnectError{Addr: addr, Stage: "dial", Err: err}
		}
		if !m.awaitAdmitted(ai.ID) {
			return node.PeerInfo{}, &ConnectError{Addr: addr, Stage: "admission", Err: errNotAdmitted}
		}
	}
	for _, pi := range m.Peers() {
		if pi.PeerID == ai.ID.String() {
			return pi, nil
		}
	}
	return node.PeerInfo{}, &ConnectError{Addr: addr, Stage: "admission", Err: errors.New("the peer left right after its admission")}
}

// holePunchProtocol is DCUtR's stream protocol; the hole-punch service
// registers it once it has a public address to offer.
const holePunchProtocol = "/libp2p/dcutr"

// maxObserved bounds the observed addresses kept (one per peer).
const maxObserved = 256

// idHost is the libp2p host's identify accessor (*basichost.BasicHost).
type idHost interface{ IDService() identify.IDService }

// startHolePunch runs DCUtR (TCP and QUIC) as a service of our own rather
// than libp2p's EnableHolePunching, for two reasons. libp2p's arms only
// once the host has a public address and then reacts to new inbound
// relayed connections only; a member's relayed connection is usually made
// in the first second, before that, and would never be punched — we
// start the punch ourselves for each member admitted over an inbound
// relayed connection (punchWhenArmed). And its addresses come from
// libp2p's observed-address manager; ours from what admitted members saw
// in identify (holePunchAddrs), so a stranger cannot choose the
// addresses we offer for a hole punch.
//
// It starts with the first admitted peer (ensureGossip), not with the
// mesh: the service polls holePunchAddrs until it returns something
// (every 5 s at most), and behind a NAT that is never before a peer is
// admitted, since the addresses are what admitted members observed. A host
// with a public address of its own arms at once either way; nobody can
// use the punch before a session over the relay admitted them.
func (m *Mesh) startHolePunch() (*holepunch.Service, error) {
	ih, ok := m.h.(idHost)
	if !ok {
		return nil, errors.New("start hole punching: the libp2p host has no identify service")
	}
	s, err := holepunch.NewService(m.h, ih.IDService(), m.holePunchAddrs, holepunch.WithTracer(hpTracer{m}))
	if err != nil {
		return nil, fmt.Errorf("start hole punching: %w", err)
	}
	return s, nil
}

// watchObserved keeps, per peer, the address it observed for our side of
// a direct connection made from one of our listen ports (the mapping a
// port-preserving NAT gives every connection from that port).
func (m *Mesh) watchObserved(ctx context.Context) {
	m.follow(ctx, new(event.EvtPeerIdentificationCompleted), "identify", func(e any) {
		ev := e.(event.EvtPeerIdentificationCompleted)
		if ev.ObservedAddr == nil || ev.Conn == nil || isRelayed(ev.Conn) || !m.fromListenPort(ev.Conn.LocalMultiaddr()) {
			return
		}
		m.obsMu.Lock()
		if _, ok := m.observed[ev.Peer]; ok || len(m.observed) < maxObserved {
			m.observed[ev.Peer] = ev.ObservedAddr
		}
		m.obsMu.Unlock()
	})
}

// fromListenPort reports whether local (a connection's local address) uses
// the transport and port of one of our listen addresses.
func (m *Mesh) fromListenPort(local ma.Multiaddr) bool {
	key := func(a ma.Multiaddr) string {
		if p, err := a.ValueForProtocol(ma.P_TCP); err == nil {
			return "tcp/" + p
		}
		if p, err := a.ValueForProtocol(ma.P_UDP); err == nil {
			return "udp/" + p
		}
		return ""
	}
	k := key(local)
	if k == "" {
		return false
	}
	for _, l := range m.h.Network().ListenAddresses() {
		if key(l) == k {
			return true
		}
	}
	return false
}

// holePunchAddrs are the public addresses we offer in a hole punch: our
// own public listen addresses and those admitted members observed for us.
func (m *Mesh) holePunchAddrs() []ma.Multiaddr {
	var out []ma.Multiaddr
	add := func(a ma.Multiaddr) {
		if a != nil && !isCircuit(a) && manet.IsPublicAddr(a) && !slices.ContainsFunc(out, a.Equal) {
			out = append(out, a)
		}
	}
	for _, a := range m.h.Addrs() {
		add(a)
	}
	m.obsMu.Lock()
	obs := make(map[peer.ID]ma.Multiaddr, len(m.observed))
	for p, a := range m.observed {
		obs[p] = a
	}
	m.obsMu.Unlock()
	for p, a := range obs {
		if m.admitted(p) {
			add(a)
		}
	}
	return out
}

// punchWhenArmed starts a hole punch with pid, a member admitted over a
// relayed connection it opened to us (DCUtR's initiator is the side the
// relayed connection came in to), once the service has armed — it
// registers its protocol when holePunchAddrs first returns something,
// polling every few seconds. It gives up when the peer goes away or has
// a direct connection, or once a punch was tried.
//
// A DirectConnect that ends before punching is tried again: the peer arms
// its own service only once it has an observed address, often after our
// first try, and refuses the DCUtR stream until then ("protocols not
// supported"); libp2p does not retry that. (The attempt counter is the
// mesh's, so a punch with another peer meanwhile also ends the retries.)
func (m *Mesh) punchWhenArmed(ctx context.Context, pid peer.ID) {
	for range 40 { // ~20 s: the service re-checks its addresses every 5 s at most
		if m.connKind(pid) != ConnRelayed {
			return
		}
		if slices.Contains(m.h.Mux().Protocols(), holePunchProtocol) {
			tried := m.reach.hpAttempts.Load()
			err := m.hps.Load().DirectConnect(pid) // started before pid was admitted
			if err == nil || m.reach.hpAttempts.Load() != tried {
				return
			}
			m.log.Debug("hole punch not started; trying again", "peer", pid, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// dedupeWait lets a crossing relayed dial complete before dedupeRelayed
// looks.
const dedupeWait = 200 * time.Millisecond

// dedupeRelayed keeps one relayed connection to pid. Two members told of
// each other at once may each dial through the relay; each is then the
// receiving end of one circuit, both start a hole punch, and the punches
// cross and fail. Both sides keep the circuit the smaller PeerID dialled
// and close the other, so they agree without a word.
func (m *Mesh) dedupeRelayed(ctx context.Context, pid peer.ID) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(dedupeWait):
	}
	var relayed []network.Conn
	for _, c := range m.h.Network().ConnsToPeer(pid) {
		if isRelayed(c) {
			relayed = append(relayed, c)
		}
	}
	if len(relayed) < 2 {
		return
	}
	smallerDials := network.DirOutbound // the direction, seen from here, of a circuit the smaller PeerID dialled
	if m.h.ID() > pid {
		smallerDials = network.DirInbound
	}
	keep := relayed[0] // both from one side: keep the first, close the rest
	for _, c := range relayed {
		if c.Stat().Direction == smallerDials {
			keep = c
			break
		}
	}
	for _, c := range relayed {
		if c != keep {
			_ = c.Close()
		}
	}
}
