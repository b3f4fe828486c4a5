package mesh

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/cmbnode/cmbnode/node"
)

// Why a node has the peers it has: how the peers it keeps dialled fare,
// and whom it refused at the handshake (node.DialReporter, for status).

// Refusal reasons (node.RefusedPeer.Reason).
const (
	refusedGroup = "group" // the handshake named another group
	refusedProof = "proof" // no valid membership proof
	refusedEpoch = "epoch" // its group secret epoch expired
)

// maxShownGroup bounds the group a refused handshake named, as status
// shows it (it is the peer's word, displayed to a person).
const maxShownGroup = 64

// maxRefused bounds the refusals kept: beyond it, expired ones are dropped
// when another is added (each needs a connection, which libp2p bounds).
const maxRefused = 1024

// refusal is a peer refused at the handshake: it is not dialled, nor is a
// session opened to it, until until — unless it presents a handshake that
// passes (clearRefusal).
type refusal struct {
	until  time.Time
	reason string
	group  string
}

// kept is a peer keepDialled keeps connected (a bootstrap peer or a
// relay): how its dials fare; guarded by m.mu.
type kept struct {
	addr    string // as configured
	id      peer.ID
	kind    string // "bootstrap" or "relay"
	failing bool   // the last dial failed; cleared by a connection
	lastErr string
}

// dialFailed records a failed dial of k. The first failure of each outage
// is logged at WARN — an unreachable bootstrap is why a node may have no
// peers — and later ones at DEBUG. A dial refused by libp2p's own dial
// backoff says nothing new, so it keeps the cause seen before.
func (m *Mesh) dialFailed(k *kept, retryIn time.Duration, err error) {
	backoff := errors.Is(err, swarm.ErrDialBackoff)
	m.mu.Lock()
	first := !k.failing && !backoff
	if !backoff || k.lastErr == "" {
		k.lastErr = dialCause(err)
	}
	k.failing = k.failing || !backoff
	cause := k.lastErr
	m.mu.Unlock()
	if first {
		m.log.Warn("cannot reach a "+k.kind+" peer; retrying with backoff", "addr", k.addr, "retryIn", retryIn, "err", cause)
		return
	}
	m.log.Debug(k.kind+" dial failed", "peer", k.id, "retryIn", retryIn, "err", err)
}

// dialSucceeded records that k is connected again.
func (m *Mesh) dialSucceeded(k *kept) {
	m.mu.Lock()
	k.failing = false
	m.mu.Unlock()
}

// dialCause is a dial error's cause, short enough for one status line:
// the system's word for the first address that failed ("connection
// refused"), else the first address's error, else the error itself.
func dialCause(err error) string {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "timed out"
	}
	var de *swarm.DialError
	if errors.As(err, &de) {
		switch {
		case len(de.DialErrors) > 0:
			err = de.DialErrors[0].Cause
		case de.Cause != nil:
			err = de.Cause
		}
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Bootstrap reports the configured bootstrap peers (node.DialReporter).
func (m *Mesh) Bootstrap() []node.BootstrapPeer {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]node.BootstrapPeer, 0, len(m.kept))
	for _, k := range m.kept {
		if k.kind != "bootstrap" {
			continue
		}
		_, ok := m.peers[k.id]
		b := node.BootstrapPeer{Addr: k.addr, Connected: ok, LastError: k.lastErr}
		if r, refused := m.mismatch[k.id]; refused && now.Before(r.until) {
			b.LastError = "refused: " + refusalText(r)
		}
		out = append(out, b)
	}
	return out
}

// refusalText words a refusal for the bootstrap line's last error.
func refusalText(r refusal) string {
	switch r.reason {
	case refusedGroup:
		return "another group"
	case refusedEpoch:
		return "its group secret epoch expired"
	}
	return "no valid group membership proof"
}

// Refused lists the peers refused at the handshake whose hold has not
// run out, the latest first (node.DialReporter).
func (m *Mesh) Refused() []node.RefusedPeer {
	now := time.Now()
	m.mu.Lock()
	out := make([]node.RefusedPeer, 0, len(m.mismatch))
	for pid, r := range m.mismatch {
		if now.Before(r.until) {
			out = append(out, node.RefusedPeer{PeerID: pid.String(), Reason: r.reason, Group: r.group, Until: r.until.UnixMilli()})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b node.RefusedPeer) int {
		if a.Until != b.Until {
			return int(b.Until - a.Until)
		}
		if a.PeerID < b.PeerID {
			return -1
		}
		return 1
	})
	return out
}
