package mesh

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/groupkey"
)

// Membership proof (private groups). Right after the two handshakes, and
// before any other frame, each side sends a nonce frame and then a proof
// frame; a peer is admitted (added to m.peers, pinned in the roster, let
// onto the topic, served) only once its proof verifies:
//
//	→ handshake (group = the tag), → x-cmbnode-group-nonce {v, epoch, nonce}
//	← handshake,                   ← x-cmbnode-group-nonce
//	→ x-cmbnode-group-proof {v, epoch, mac}   (the stream's opener)
//	← x-cmbnode-group-proof                   (once the opener's verified)
//
// epoch in the nonce frame is the newest the sender holds; both sides then
// prove at the lower of the two (the session's epoch), which each must
// accept (groupkey.Keyring.Accepts: held, and not superseded for longer
// than the grace period). mac is groupkey.Keyring.Prove over both PeerIDs
// and both nonces, so a proof is good for this connection only. Anything
// else in place of these frames — a ping, a fetch, a malformed or
// oversized frame, silence past the handshake timeout — ends the session
// with error 1006 before a single byte of the group's content is sent.
const (
	typeGroupNonce = "x-cmbnode-group-nonce"
	typeGroupProof = "x-cmbnode-group-proof"
	// extGroup is the handshake extension a private member announces.
	extGroup = "x-cmbnode-group-v1"
	// maxProofFrame caps the proof frames: a few hundred bytes are enough,
	// so a non-member cannot make us read a megabyte before it proves.
	maxProofFrame = 1024
	// closeDelay lets an error frame leave before the connection closes.
	closeDelay = 500 * time.Millisecond
)

type groupNonce struct {
	V     int    `json:"v"`
	Epoch uint32 `json:"epoch"`
	Nonce []byte `json:"nonce"` // base64 (encoding/json)
}

type groupProof struct {
	V     int    `json:"v"`
	Epoch uint32 `json:"epoch"`
	MAC   []byte `json:"mac"`
}

// ProofError is a peer refused for its membership proof (or for not
// giving one). Err wraps a groupkey error when the proof itself failed.
type ProofError struct {
	Reason string
	Err    error
}

func (e *ProofError) Error() string {
	if e.Err != nil {
		return "group membership proof: " + e.Reason + ": " + e.Err.Error()
	}
	return "group membership proof: " + e.Reason
}

func (e *ProofError) Unwrap() error { return e.Err }

// readSmall reads one length-prefixed frame of at most limit bytes.
func readSmall(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > uint32(limit) {
		return nil, &ProofError{Reason: fmt.Sprintf("a %d-byte frame where a proof frame (at most %d) was due", n, limit)}
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("read %d-byte frame: %w", n, err)
	}
	return buf, nil
}

// readProofFrame reads the next frame, which must be of type typ, into v.
// An error frame from the peer is reported as such (it refused us).
func (ss *session) readProofFrame(typ string, v any) error {
	p, err := readSmall(ss.s, maxProofFrame)
	if err != nil {
		var pe *ProofError
		if errors.As(err, &pe) {
			return err
		}
		if isTimeout(err) {
			return &ProofError{Reason: "no " + typ + " within " + ss.m.cfg.HandshakeTimeout.String()}
		}
		return fmt.Errorf("reading %s: %w", typ, err)
	}
	var head struct {
		Type    string `json:"type"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(p, &head); err != nil {
		return &ProofError{Reason: "an unparseable frame where " + typ + " was due"}
	}
	if head.Type == cmb.TypeError {
		return &peerRefused{code: head.Code, msg: cmb.Truncate(head.Message, 200)}
	}
	if head.Type != typ {
		return &ProofError{Reason: fmt.Sprintf("a %q frame where %s was due (the group is private: a peer proves membership before anything else)", cmb.Truncate(head.Type, 64), typ)}
	}
	if err := json.Unmarshal(p, v); err != nil {
		return &ProofError{Reason: "malformed " + typ + ": " + err.Error()}
	}
	return nil
}

// peerRefused is the peer's error frame in place of a proof frame.
type peerRefused struct {
	code int
	msg  string
}

func (e *peerRefused) Error() string {
	return fmt.Sprintf("the peer refused us with error %d: %s", e.code, e.msg)
}

// sendNonce sends our nonce frame and returns the nonce. It is sent right
// after our handshake, before reading the peer's, so neither side waits.
func (ss *session) sendNonce() ([]byte, error) {
	n, err := groupkey.NewNonce()
	if err != nil {
		return nil, err
	}
	p, err := marshalVendor(typeGroupNonce, groupNonce{V: 1, Epoch: ss.m.keys.Current(), Nonce: n[:]})
	if err != nil {
		return nil, err
	}
	return n[:], ss.sendRaw(p)
}

// prove runs the rest of the exchange once the peer's handshake passed:
// read its nonce, agree on the epoch, send our proof, check its proof.
// On success ss.epoch is set.
func (ss *session) prove(ourNonce []byte) error {
	m := ss.m
	var theirs groupNonce
	if err := ss.readProofFrame(typeGroupNonce, &theirs); err != nil {
		return err
	}
	if theirs.V != 1 || len(theirs.Nonce) != groupkey.NonceSize || theirs.Epoch == 0 {
		return &ProofError{Reason: fmt.Sprintf("nonce frame v%d with a %d-byte nonce at epoch %d (want v1, %d bytes, epoch ≥ 1)", theirs.V, len(theirs.Nonce), theirs.Epoch, groupkey.NonceSize)}
	}
	epoch := min(m.keys.Current(), theirs.Epoch)
	if err := m.keys.Accepts(epoch); err != nil {
		return &ProofError{Reason: "the peer's newest secret is not accepted here", Err: err}
	}
	self, remote := []byte(m.h.ID()), []byte(ss.pid)
	sendOurs := func() error {
		mac, err := m.keys.Prove(epoch, self, remote, ourNonce, theirs.Nonce)
		if err != nil {
			return err
		}
		p, err := marshalVendor(typeGroupProof, groupProof{V: 1, Epoch: epoch, MAC: mac})
		if err != nil {
			return err
		}
		return ss.sendRaw(p)
	}
	// The stream's opener proves first; the side that accepted it proves
	// only once the opener's proof verified, so a stranger that dials a
	// member gets no proof of the member's at all.
	if ss.outbound {
		if err := sendOurs(); err != nil {
			return err
		}
	}
	var proof groupProof
	if err := ss.readProofFrame(typeGroupProof, &proof); err != nil {
		return err
	}
	if proof.V != 1 || proof.Epoch != epoch {
		return &ProofError{Reason: fmt.Sprintf("proof at epoch %d, the session's epoch is %d", proof.Epoch, epoch)}
	}
	if err := m.keys.Verify(epoch, remote, self, theirs.Nonce, ourNonce, proof.MAC); err != nil {
		return &ProofError{Reason: "the proof does not verify", Err: err}
	}
	if !ss.outbound {
		if err := sendOurs(); err != nil {
			return err
		}
	}
	ss.epoch = epoch
	return nil
}

// refuse ends a session whose peer failed (or skipped) the proof: an
// error frame, then the whole connection closed once it had a moment to
// leave, the peer counted, logged with its address, and not re-dialled
// for mismatchHold. It never got anything of the group.
func (ss *session) refuse(err error) {
	m := ss.m
	m.stats.proofFailed.Add(1)
	m.n.Counters.CountReject("group-proof")
	m.log.Warn("peer refused: no valid group membership proof", "peer", ss.pid, "addr", ss.s.Conn().RemoteMultiaddr().String(), "outbound", ss.outbound, "err", err)
	ss.fail(cmb.CodeAuthFailed, "group membership proof failed")
	m.markMismatched(ss.pid, refusedProof, "")
	m.closeSoon(ss.pid)
}

// closeSoon closes the connection to pid after closeDelay.
func (m *Mesh) closeSoon(pid peer.ID) {
	m.goRun(func(ctx context.Context) {
		select {
		case <-ctx.Done():
		case <-time.After(closeDelay):
			_ = m.h.Network().ClosePeer(pid)
		}
	})
}

// watchKeys re-reads the group's secrets whenever their directory
// changes (groupkey's Watch: a rotation here, or a join of the new
// invite), or every KeyReload where it cannot be watched. When an epoch
// is added, sessions running at an older epoch are restarted, so each
// negotiates again and moves to the newest epoch both sides hold. Sessions
// whose epoch is no longer accepted are ended after every reload and at
// the moment an epoch's grace ends (Keyring.NextExpiry): a peer that holds
// only a secret superseded longer than the grace period ago is refused
// even if it connected before. An idle daemon is not woken otherwise.
func (m *Mesh) watchKeys(ctx context.Context) {
	changed, err := m.keys.Watch(ctx)
	if err != nil && !errors.Is(err, groupkey.ErrNoHome) {
		m.log.Warn("cannot watch the group secrets; re-reading them periodically", "every", m.cfg.KeyReload, "err", err)
	}
	// poll ticks every KeyReload while the directory is not watched.
	var poll *time.Ticker
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	if changed == nil {
		poll = time.NewTicker(m.cfg.KeyReload)
	}
	expiry := time.NewTimer(time.Hour)
	defer expiry.Stop()
	for {
		expiry.Stop()
		if at, ok := m.keys.NextExpiry(); ok {
			expiry.Reset(time.Until(at))
		}
		var added []uint32
		var polled <-chan time.Time
		if poll != nil {
			polled = poll.C
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changed:
			if !ok {
				m.log.Warn("the group secrets' directory went away; re-reading it periodically", "every", m.cfg.KeyReload)
				changed = nil
				poll = time.NewTicker(m.cfg.KeyReload)
			}
			added = m.reloadKeys()
		case <-polled:
			added = m.reloadKeys()
		case <-expiry.C:
		}
		m.checkSessionEpochs(added)
	}
}

// reloadKeys re-reads the group's secrets and returns the epochs added.
func (m *Mesh) reloadKeys() []uint32 {
	added, err := m.keys.Reload()
	if err != nil {
		m.log.Warn("re-reading the group secrets failed; keeping the ones loaded", "err", err)
	}
	if len(added) > 0 {
		m.log.Info("group secret epoch added", "group", m.group, "epochs", added, "current", m.keys.Current())
	}
	return added
}

// checkSessionEpochs ends the sessions whose epoch is no longer accepted
// and, when epochs were added, restarts those below the newest.
func (m *Mesh) checkSessionEpochs(added []uint32) {
	cur := m.keys.Current()
	for _, ss := range m.allSessions() {
		switch {
		case m.keys.Accepts(ss.epoch) != nil:
			m.log.Warn("ending a session: its group secret epoch has expired", "peer", ss.pid, "addr", ss.s.Conn().RemoteMultiaddr().String(), "nodeId", ss.nodeID, "epoch", ss.epoch)
			m.stats.epochExpired.Add(1)
			ss.fail(cmb.CodeAuthFailed, "group secret epoch expired")
			m.markMismatched(ss.pid, refusedEpoch, "")
			m.closeSoon(ss.pid)
		case len(added) > 0 && ss.epoch < cur:
			_ = ss.s.Reset() // the peer reconnects (removeSession) and renegotiates
		}
	}
}

// allSessions returns every live session.
func (m *Mesh) allSessions() []*session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*session
	for _, ps := range m.peers {
		out = append(out, ps.sessions...)
	}
	return out
}
