package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

const (
	writeTimeout   = 20 * time.Second // one frame must leave within this
	requestTimeout = 30 * time.Second // a request's answer must arrive within this
	serveParallel  = 8                // requests one session serves at once
	maxPeerInfo    = 64               // peer-info entries acted upon per frame
)

// PeerEvent is the data of peer-joined and peer-left events.
type PeerEvent struct {
	NodeID string `json:"nodeId"`
	Name   string `json:"name"`
	PeerID string `json:"peerId"`
}

// session is one /mmp/1.1.0 stream with a peer. After the handshake it
// carries heartbeats, peer-info, fetches and catch-up requests both ways.
type session struct {
	m        *Mesh
	s        network.Stream
	pid      peer.ID
	outbound bool
	remote   *cmb.Handshake
	nodeID   string
	// epoch is the group secret epoch this session's proofs were made at
	// and its fetched records are sealed under (0 in a public group).
	epoch uint32

	// wmu (one token) serialises frame writes. It is a channel, not a
	// mutex: a writer queued behind one blocked on flow control then waits
	// durably, so a testing/synctest bubble still advances its clock and
	// the blocked write completes (simulated groups, sim_test.go).
	wmu      chan struct{}
	lastRecv atomic.Int64 // unix nanos of the last frame received

	reqMu sync.Mutex
	reqs  map[string]chan inFrame
	seq   atomic.Uint64
	serve chan struct{}
	done  chan struct{}
}

// runSession drives one stream from handshake to close.
func (m *Mesh) runSession(ctx context.Context, s network.Stream, outbound bool) {
	ss := &session{
		m: m, s: s, pid: s.Conn().RemotePeer(), outbound: outbound,
		reqs: map[string]chan inFrame{}, serve: make(chan struct{}, serveParallel), done: make(chan struct{}),
		wmu: make(chan struct{}, 1),
	}
	defer close(ss.done)
	if err := ss.handshake(ctx); err != nil {
		m.stats.handshakeFailed.Add(1)
		var pe *ProofError
		if !errors.As(err, &pe) { // refuse logged it at WARN
			m.log.Info("mmp handshake refused", "peer", ss.pid, "addr", s.Conn().RemoteMultiaddr().String(), "outbound", outbound, "err", err)
		}
		// Close, not Reset: the error frame already written must arrive.
		_ = s.Close()
		return
	}
	m.stats.handshakes.Add(1)
	m.clearRefusal(ss.pid)
	if err := m.addSession(ss); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("session ended: gossip did not start", "peer", ss.pid, "err", err)
		}
		_ = s.Reset()
		return
	}
	defer m.removeSession(ss)

	var wg sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(ctx)
	wg.Go(func() { ss.heartbeat(hbCtx) })
	defer func() {
		stopHB()
		wg.Wait()
	}()
	ss.sendPeerInfo()
	err := ss.readLoop(ctx)
	if err != nil && ctx.Err() == nil {
		m.log.Debug("mmp session ended", "peer", ss.pid, "nodeId", ss.nodeID, "err", err)
	}
	ss.failPending()
	_ = s.Close()
}

// handshake sends ours and checks theirs: first frame, within the timeout,
// a version family we speak, a publicKey equal to the libp2p key the secure
// channel proved, our group, and — in a private group — a membership proof
// (proof.go); only then are the peer's keys pinned in the roster, so a
// non-member leaves no trace there.
func (ss *session) handshake(ctx context.Context) error {
	m, id := ss.m, ss.m.id
	ours := &cmb.Handshake{
		NodeID: id.NodeID, Name: id.Name, Version: cmb.ProtocolVersion, PublicKey: id.PublicKeyB64(),
		E2EPublicKey: id.E2EPublicKeyDER(), Group: m.wireGroup, LifecycleRole: "participant",
		Extensions: []string{"x-cmbnode-catchup"}, CmbnodeVersion: m.cfg.Version,
	}
	if m.keys != nil {
		ours.Extensions = append(ours.Extensions, extGroup)
	}
	if err := ss.send(ours); err != nil {
		return fmt.Errorf("sending handshake: %w", err)
	}
	var nonce []byte
	if m.keys != nil {
		var err error
		if nonce, err = ss.sendNonce(); err != nil {
			return fmt.Errorf("sending the proof nonce: %w", err)
		}
	}
	// One deadline for the handshake and the proof exchange.
	_ = ss.s.SetReadDeadline(time.Now().Add(m.cfg.HandshakeTimeout))
	payload, err := cmb.ReadFrame(ss.s, nil)
	if err != nil {
		var fe *cmb.FrameError
		switch {
		case errors.As(err, &fe):
			ss.fail(fe.Code, "frame length out of range")
		case isTimeout(err):
			ss.fail(cmb.CodeHandshakeTimeout, "no handshake within "+m.cfg.HandshakeTimeout.String())
		}
		return fmt.Errorf("reading handshake: %w", err)
	}
	f, err := cmb.ParseFrame(payload)
	hs, ok := f.(*cmb.Handshake)
	if err != nil || !ok {
		ss.fail(cmb.CodeHandshakeTimeout, "the first frame must be a handshake")
		return errors.New("first frame is not a handshake")
	}
	if code, err := hs.Validate(); err != nil {
		m.n.Counters.CountReject("handshake-invalid")
		ss.fail(code, "invalid handshake")
		return fmt.Errorf("invalid handshake: %w", err)
	}
	pub, _ := cmb.ParsePublicKey(hs.PublicKey) // Validate checked it parses
	if !ss.remoteKeyIs(pub) {
		m.n.Counters.CountReject("handshake-key-mismatch")
		ss.fail(cmb.CodeAuthFailed, "publicKey is not the key of this libp2p connection")
		return errors.New("handshake publicKey differs from the peer's libp2p key")
	}
	if g := group.Normalize(hs.Group); g != m.wireGroup {
		m.stats.groupMismatch.Add(1)
		ss.fail(cmb.CodeGroupMismatch, "group mismatch")
		m.markMismatched(ss.pid, refusedGroup, g)
		// No application frame crosses groups: drop the whole connection
		// once the error frame had a moment to leave.
		m.closeSoon(ss.pid)
		return fmt.Errorf("peer is in group %q, we are in %q", g, m.wireGroup)
	}
	nodeID := strings.ToLower(hs.NodeID)
	if nodeID == strings.ToLower(id.NodeID) {
		ss.fail(cmb.CodeDuplicateNode, "that is this node's nodeId")
		return errors.New("peer claims this node's nodeId")
	}
	if m.keys != nil {
		if err := ss.prove(nonce); err != nil {
			var refused *peerRefused
			if errors.As(err, &refused) {
				return err // it refused our proof; nothing to answer
			}
			var pe *ProofError
			if !errors.As(err, &pe) {
				pe = &ProofError{Reason: "exchange failed", Err: err}
			}
			ss.refuse(pe)
			return pe
		}
	}
	var x []byte
	if hs.E2EPublicKey != "" {
		k, err := e2e.ParsePublicKey(hs.E2EPublicKey)
		if err != nil {
			m.n.Counters.CountReject("handshake-invalid")
			ss.fail(cmb.CodeAuthFailed, "e2ePublicKey is not an X25519 key")
			return fmt.Errorf("handshake e2ePublicKey: %w", err)
		}
		x = k.Bytes()
	}
	err = m.n.PinPeer(ctx, nodeID, pub, x, hs.Name)
	if errors.Is(err, node.ErrKeyConflict) {
		m.n.Counters.CountReject("key-conflict")
		ss.fail(cmb.CodeAuthFailed, "nodeId is pinned to another key")
		return fmt.Errorf("roster: %w", err)
	}
	if err != nil {
		return fmt.Errorf("roster: %w", err)
	}
	ss.remote, ss.nodeID = hs, nodeID
	ss.lastRecv.Store(time.Now().UnixNano())
	return nil
}

func (ss *session) remoteKeyIs(pub ed25519.PublicKey) bool {
	rk := ss.s.Conn().RemotePublicKey()
	if rk == nil {
		return false
	}
	raw, err := rk.Raw()
	return err == nil && bytes.Equal(raw, pub)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fail sends an error frame and closes the stream (§7.2: connection-level).
func (ss *session) fail(code int, msg string) {
	_ = ss.send(&cmb.ErrorFrame{Code: code, Message: msg})
	_ = ss.s.CloseWrite()
}

func (ss *session) send(f cmb.Frame) error {
	p, err := cmb.MarshalFrame(f)
	if err != nil {
		return err
	}
	return ss.sendRaw(p)
}

func (ss *session) sendRaw(p []byte) error {
	ss.wmu <- struct{}{}
	defer func() { <-ss.wmu }()
	_ = ss.s.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := cmb.WriteFrame(ss.s, p); err != nil {
		return fmt.Errorf("writing to %s: %w", ss.pid, err)
	}
	return nil
}

// heartbeat pings when the peer has been silent for an interval; the read
// deadline (HeartbeatTimeout) ends a session whose peer stays silent.
func (ss *session) heartbeat(ctx context.Context) {
	iv := ss.m.cfg.HeartbeatInterval
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, ss.lastRecv.Load())) >= iv {
			if err := ss.send(&cmb.Ping{}); err != nil {
				_ = ss.s.Reset()
				return
			}
		}
	}
}

func (ss *session) readLoop(ctx context.Context) error {
	m := ss.m
	for ctx.Err() == nil {
		_ = ss.s.SetReadDeadline(time.Now().Add(m.cfg.HeartbeatTimeout))
		// A fresh buffer per frame: decoded frames may alias it.
		payload, err := cmb.ReadFrame(ss.s, nil)
		if err != nil {
			var fe *cmb.FrameError
			if errors.As(err, &fe) {
				m.n.Counters.CountReject("too-large")
				ss.fail(fe.Code, "frame length out of range")
			}
			return err
		}
		ss.lastRecv.Store(time.Now().UnixNano())
		in, err := parseIn(payload)
		if err != nil {
			continue // MMP §4.1: malformed frames are dropped, the stream stays
		}
		if err := ss.dispatch(ctx, in); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (ss *session) dispatch(ctx context.Context, in inFrame) error {
	m := ss.m
	switch f := in.mmp.(type) {
	case *cmb.Ping:
		return ss.send(&cmb.Pong{})
	case *cmb.ErrorFrame:
		m.log.Info("peer sent an error", "peer", ss.pid, "code", f.Code, "message", f.Message)
		if cmb.IsConnectionLevel(f.Code) {
			return fmt.Errorf("peer closed with error %d", f.Code)
		}
		return nil
	case *cmb.PeerInfo:
		ss.onPeerInfo(f)
		return nil
	case *cmb.CMBFrame:
		return ss.serveAsync(ctx, func(ctx context.Context) { m.ingestFrame(ctx, f, ss, "direct") })
	case *cmb.Fetch:
		return ss.serveAsync(ctx, func(ctx context.Context) { ss.serveFetch(ctx, f) })
	case *cmb.FetchResult:
		ss.deliver(in)
		return nil
	}
	switch in.typ {
	case typeDigest, typeKeys, typeRecords:
		ss.deliver(in)
	case typeDigestReq:
		return ss.serveAsync(ctx, func(ctx context.Context) { ss.serveDigest(ctx, in.body.(*digestReq)) })
	case typeKeysReq:
		return ss.serveAsync(ctx, func(ctx context.Context) { ss.serveKeys(ctx, in.body.(*keysReq)) })
	case typeFetchMany:
		return ss.serveAsync(ctx, func(ctx context.Context) { ss.serveFetchMany(ctx, in.body.(*fetchMany)) })
	}
	return nil // pong, handshake again, unknown types: nothing to do
}

// serveAsync runs a request handler off the read loop, at most
// serveParallel at once; beyond that the read loop waits, which pushes back
// on the peer through the stream's flow control.
func (ss *session) serveAsync(ctx context.Context, f func(context.Context)) error {
	select {
	case ss.serve <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	ss.m.goRun(func(ctx context.Context) {
		defer func() { <-ss.serve }()
		f(ctx)
	})
	return nil
}

// request sends a frame carrying reqID and waits for the answer echoing it.
func (ss *session) request(ctx context.Context, reqID string, payload []byte) (inFrame, error) {
	ch := make(chan inFrame, 1)
	ss.reqMu.Lock()
	ss.reqs[reqID] = ch
	ss.reqMu.Unlock()
	defer func() {
		ss.reqMu.Lock()
		delete(ss.reqs, reqID)
		ss.reqMu.Unlock()
	}()
	if err := ss.sendRaw(payload); err != nil {
		return inFrame{}, err
	}
	t := time.NewTimer(requestTimeout)
	defer t.Stop()
	select {
	case in, ok := <-ch:
		if !ok {
			return inFrame{}, fmt.Errorf("session with %s closed", ss.pid)
		}
		return in, nil
	case <-ss.done:
		return inFrame{}, fmt.Errorf("session with %s closed", ss.pid)
	case <-t.C:
		return inFrame{}, fmt.Errorf("no answer from %s within %s", ss.pid, requestTimeout)
	case <-ctx.Done():
		return inFrame{}, ctx.Err()
	}
}

func (ss *session) newReqID() string {
	return "c" + strconv.FormatUint(ss.seq.Add(1), 36)
}

// deliver routes an answer to its pending request. An unsolicited answer
// ends nothing (MMP §7.1 cmb-fetch-result).
func (ss *session) deliver(in inFrame) {
	ss.reqMu.Lock()
	ch, ok := ss.reqs[in.reqID]
	if ok {
		delete(ss.reqs, in.reqID)
	}
	ss.reqMu.Unlock()
	if ok {
		ch <- in
	}
}

func (ss *session) failPending() {
	ss.reqMu.Lock()
	for id, ch := range ss.reqs {
		close(ch)
		delete(ss.reqs, id)
	}
	ss.reqMu.Unlock()
}

func (m *Mesh) addSession(ss *session) error {
	// GossipSub runs before the first peer counts as admitted, so the
	// peer's gossip streams and the catch-up below find it running.
	if err := m.ensureGossip(); err != nil {
		return err
	}
	m.mu.Lock()
	ps, ok := m.peers[ss.pid]
	if !ok {
		ps = &peerState{info: node.PeerInfo{
			NodeID: ss.nodeID, Name: ss.remote.Name, PeerID: ss.pid.String(), Group: m.group,
			Version: ss.remote.Version, Build: buildOf(ss.remote),
		}}
		m.peers[ss.pid] = ps
	}
	ps.sessions = append(ps.sessions, ss)
	// Wake whoever waits for an admission (the relay's ACL).
	close(m.admitCh)
	m.admitCh = make(chan struct{})
	m.mu.Unlock()
	m.remember(ss)
	if c := ss.s.Conn(); isRelayed(c) && c.Stat().Direction == network.DirInbound {
		m.goRun(func(ctx context.Context) { m.punchWhenArmed(ctx, ss.pid) })
	}
	// libp2p punches as soon as identify ends on an inbound circuit, so the
	// direct connection can come up before this session on the circuit
	// was admitted; onConnected then had no session to move. Move it now.
	if isRelayed(ss.s.Conn()) && m.connKind(ss.pid) == ConnBoth {
		m.goRun(func(ctx context.Context) { m.upgradeToDirect(ctx, ss.pid) })
	}
	if ok {
		return nil
	}
	m.h.ConnManager().TagPeer(ss.pid, memberTag, memberTagValue)
	// Members whose sessions with us began earlier learn of this one now.
	m.goRun(func(context.Context) { m.announce(ss.pid) })
	m.log.Info("peer joined", "nodeId", ss.nodeID, "name", ss.remote.Name, "peer", ss.pid)
	m.n.Events().Publish(events.Event{Name: events.PeerJoined, Data: PeerEvent{NodeID: ss.nodeID, Name: ss.remote.Name, PeerID: ss.pid.String()}})
	m.goRun(func(ctx context.Context) { m.catchUpPeer(ctx, ss.pid, "connect") })
	return nil
}

func (m *Mesh) removeSession(ss *session) {
	m.mu.Lock()
	ps, ok := m.peers[ss.pid]
	last := false
	if ok {
		for i, x := range ps.sessions {
			if x == ss {
				ps.sessions = append(ps.sessions[:i], ps.sessions[i+1:]...)
				break
			}
		}
		if len(ps.sessions) == 0 {
			delete(m.peers, ss.pid)
			last = true
		}
	}
	m.mu.Unlock()
	if !last {
		return
	}
	m.h.ConnManager().UntagPeer(ss.pid, memberTag)
	m.log.Info("peer left", "nodeId", ss.nodeID, "name", ss.remote.Name, "peer", ss.pid)
	m.n.Events().Publish(events.Event{Name: events.PeerLeft, Data: PeerEvent{NodeID: ss.nodeID, Name: ss.remote.Name, PeerID: ss.pid.String()}})
	// A still-connected peer whose stream died (e.g. a heartbeat timeout)
	// gets a fresh session.
	if m.ctx.Err() == nil && m.h.Network().Connectedness(ss.pid) == network.Connected && !m.isMismatched(ss.pid) {
		m.goRun(func(ctx context.Context) {
			select {
			case <-ctx.Done():
			case <-time.After(openerGrace):
				if m.sessionFor(ss.pid) == nil {
					m.openSession(ctx, ss.pid)
				}
			}
		})
	}
}

// sendPeerInfo tells the peer which other group members we are connected
// to, with their addresses, so members that only know one of us find all.
func (ss *session) sendPeerInfo() {
	m := ss.m
	var entries []cmb.PeerEntry
	for _, pi := range m.Peers() {
		if pi.PeerID == ss.pid.String() {
			continue
		}
		entries = append(entries, m.entryFor(pi))
	}
	if len(entries) == 0 {
		return // MMP §5.2: peer-info only if the node knows peers
	}
	_ = ss.send(&cmb.PeerInfo{Peers: entries})
}

// entryFor is pi's peer-info entry. Circuit addresses through our relays
// (and through us, when we relay) come first: receivers act on the first
// peerInfoAddrs addresses only, and a member behind a NAT advertises
// private addresses nobody else can dial.
func (m *Mesh) entryFor(pi node.PeerInfo) cmb.PeerEntry {
	e := cmb.PeerEntry{NodeID: pi.NodeID, Name: pi.Name, LastSeen: time.Now().UnixMilli()}
	pid, err := peer.Decode(pi.PeerID)
	if err == nil {
		for _, a := range m.circuitAddrsFor(pid) {
			e.Addrs = append(e.Addrs, a.String()+"/p2p/"+pi.PeerID)
		}
	}
	for _, a := range pi.Addrs {
		e.Addrs = append(e.Addrs, a+"/p2p/"+pi.PeerID)
	}
	return e
}

// onPeerInfo dials the peers a peer-info frame advertises, within bounds a
// lying peer cannot stretch: the first maxPeerInfo entries, one peer and
// at most peerInfoAddrs addresses per entry, and the per-advertiser and
// mesh-wide dial bounds of dialAdvertised.
//
// The entries acted on are taken in random order: dials stop at
// PeerTarget, and every receiver taking the advertiser's first ones would
// crowd the same few members and leave the rest of the group unreached.
func (ss *session) onPeerInfo(f *cmb.PeerInfo) {
	m := ss.m
	entries := f.Peers[:min(len(f.Peers), maxPeerInfo)]
	for _, i := range rand.Perm(len(entries)) {
		e := entries[i]
		if strings.EqualFold(e.NodeID, m.id.NodeID) {
			continue
		}
		if ai, ok := advertisedPeer(e); ok {
			m.dialAdvertised(ss.pid, ai)
		}
	}
}

// advertisedPeer reads an entry's first peerInfoAddrs addresses. An entry
// describes one node, so the first /p2p/ id named is the peer and addresses
// naming another id are dropped.
func advertisedPeer(e cmb.PeerEntry) (peer.AddrInfo, bool) {
	var ai peer.AddrInfo
	for _, a := range e.Addrs[:min(len(e.Addrs), peerInfoAddrs)] {
		x, err := ma.NewMultiaddr(a)
		if err != nil {
			continue
		}
		transport, pid := peer.SplitAddr(x)
		if transport == nil || pid == "" {
			continue
		}
		if ai.ID == "" {
			ai.ID = pid
		}
		if pid == ai.ID {
			ai.Addrs = append(ai.Addrs, transport)
		}
	}
	return ai, ai.ID != ""
}

// maxBuild bounds the x-cmbnode-version a peer's handshake may show.
const maxBuild = 64

// buildOf is the cmbnode build a handshake names, shown only when it is
// short and printable (it is the peer's word, displayed to a person).
func buildOf(hs *cmb.Handshake) string {
	v := hs.CmbnodeVersion
	if len(v) > maxBuild {
		return ""
	}
	for _, r := range v {
		if r < 0x21 || r > 0x7e {
			return ""
		}
	}
	return v
}
