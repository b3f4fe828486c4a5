package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/store"
)

// A listener's resume point (docs/ipc.md "Resuming a listener").
//
// Every cmb-accepted event carries a cursor, "<boot>.<seq>": seq numbers
// the records this node accepted since it opened, in the order their
// events were published, and boot is random per Open, so a cursor is
// never read against another run's numbering. The node keeps the last
// DefaultAcceptedRing accepted records in a ring, each as its key and the
// few members of its event the store does not keep (how it arrived,
// whether it was directed or judged); Replay rebuilds the rest of the
// event from the store. A cursor older than the ring, or from another
// boot, is refused with ErrCursorExpired: what it missed is no longer
// numbered here, and only a full catch-up (export or recent) finds it.

// DefaultAcceptedRing is how many accepted records the resume ring holds.
// An entry is 35 bytes with no pointers: 2.2 MiB when full.
const DefaultAcceptedRing = 1 << 16

// ErrCursorExpired is wrapped when a listen cursor names a place this node
// no longer numbers: another run of the daemon, or older than the ring.
var ErrCursorExpired = errors.New("cursor expired")

// acceptEntry is one accepted record in the ring. The key is packed (the
// digest's bytes): every accepted record passed Verify, whose key check
// admits only cmb1-<64 hex> and cmb-<32 hex>.
type acceptEntry struct {
	digest [32]byte
	klen   uint8 // digest bytes used: 32 (cmb1-), 16 (cmb-), 0 (did not pack)
	flags  uint8
	via    uint8 // index into acceptLog.vias
}

const (
	entryDirected = 1 << iota
	entryJudged   // the event carried an SVAF verdict
)

// acceptLog numbers accepted records and publishes their events. Its lock
// is held across numbering and Publish, so the bus delivers events in
// cursor order and a subscriber that reads head after subscribing receives
// every event numbered after it.
type acceptLog struct {
	boot string
	size int

	mu   sync.Mutex
	head uint64 // seq of the newest entry; 0 before the first
	ring []acceptEntry
	// vias interns Source.Via, which comes from this program's own paths
	// (gossip, fetch, catch-up, import), never from the network; index 0
	// is "". Past 255 distinct values a via is kept as "".
	vias []string
}

func newAcceptLog(size int) (*acceptLog, error) {
	if size <= 0 {
		size = DefaultAcceptedRing
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("boot id: %w", err)
	}
	return &acceptLog{boot: hex.EncodeToString(b[:]), size: size, vias: []string{""}}, nil
}

func (l *acceptLog) cursor(seq uint64) string {
	return l.boot + "." + strconv.FormatUint(seq, 10)
}

// publish numbers ev, keeps it in the ring and publishes it, with its
// fields from f, if anyone listens.
func (l *acceptLog) publish(bus *events.Bus, ev AcceptedEvent, f *cmb.Fields, judged bool) {
	e := acceptEntry{}
	switch cmb.SchemeOf(ev.Key) {
	case cmb.SchemeV1:
		hex.Decode(e.digest[:], []byte(ev.Key[len(cmb.PrefixV1):]))
		e.klen = 32
	case cmb.SchemeLegacy:
		hex.Decode(e.digest[:16], []byte(ev.Key[len(cmb.PrefixLegacy):]))
		e.klen = 16
	}
	if ev.Directed {
		e.flags |= entryDirected
	}
	if judged {
		e.flags |= entryJudged
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e.via = l.intern(ev.Via)
	l.head++
	if len(l.ring) < l.size {
		l.ring = append(l.ring, e)
	} else {
		l.ring[(l.head-1)%uint64(l.size)] = e
	}
	seq := l.head
	bus.PublishFunc(events.CMBAccepted, func() any {
		ev.Seq, ev.Cursor, ev.Fields = seq, l.cursor(seq), FieldsView(f)
		return ev
	})
}

func (l *acceptLog) intern(via string) uint8 {
	for i, v := range l.vias {
		if v == via {
			return uint8(i)
		}
	}
	if len(l.vias) == 256 {
		return 0
	}
	l.vias = append(l.vias, via)
	return uint8(len(l.vias) - 1)
}

// oldest is the seq of the oldest entry held (head+1 when none is).
func (l *acceptLog) oldest() uint64 { return l.head - uint64(len(l.ring)) + 1 }

func (e acceptEntry) key() string {
	switch e.klen {
	case 32:
		return cmb.PrefixV1 + hex.EncodeToString(e.digest[:32])
	case 16:
		return cmb.PrefixLegacy + hex.EncodeToString(e.digest[:16])
	}
	return ""
}

// Head is the cursor of the newest accepted record ("<boot>.0" before
// the first): a listener subscribed before reading it receives every
// cmb-accepted event after it.
func (n *Node) Head() (cursor string, seq uint64) {
	n.accepted.mu.Lock()
	defer n.accepted.mu.Unlock()
	return n.accepted.cursor(n.accepted.head), n.accepted.head
}

// Replay reads, in order, the accepted records after a cursor.
type Replay struct {
	n    *Node
	next uint64 // seq of the next entry to read
}

// ReplayAfter starts a replay of the records accepted after cursor. A
// malformed cursor, or one ahead of this node, wraps ErrBadRequest; one
// from another boot or older than the ring wraps ErrCursorExpired.
func (n *Node) ReplayAfter(cursor string) (*Replay, error) {
	l := n.accepted
	boot, num, ok := strings.Cut(cursor, ".")
	seq, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil || len(boot) != len(l.boot) {
		return nil, fmt.Errorf("%w: cursor %q is not one this daemon gave (it looks like <boot>.<seq>, from a cmb-accepted event's cursor)", ErrBadRequest, cmb.Truncate(cursor, 80))
	}
	r := &Replay{n: n, next: seq + 1}
	if boot != l.boot {
		return nil, r.expired("it is from another run of the daemon")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.head {
		return nil, fmt.Errorf("%w: cursor %q is ahead of this daemon's newest record (%s)", ErrBadRequest, cursor, l.cursor(l.head))
	}
	if r.next < l.oldest() {
		return nil, r.expired(fmt.Sprintf("more than the %d records this daemon keeps for resuming arrived after it", l.size))
	}
	return r, nil
}

func (r *Replay) expired(why string) error {
	return fmt.Errorf("%w: %s; `listen` without `after`, then catch up with `export` or `recent`", ErrCursorExpired, why)
}

// Last is the seq of the last record the replay has passed (delivered or
// skipped): a live event at or before it was replayed already.
func (r *Replay) Last() uint64 { return r.next - 1 }

// Next returns the events of up to max records after the last one read,
// each as it was published, cursor included; records forgotten,
// quarantined or purged since are skipped. done is true once the replay
// has reached the newest record. It wraps ErrCursorExpired if the ring
// moved past the replay while it ran.
func (r *Replay) Next(ctx context.Context, max int) (evs []AcceptedEvent, done bool, err error) {
	l := r.n.accepted
	l.mu.Lock()
	if r.next < l.oldest() {
		l.mu.Unlock()
		return nil, false, r.expired(fmt.Sprintf("more than the %d records this daemon keeps for resuming arrived while it was replayed", l.size))
	}
	first := r.next
	var ents []acceptEntry
	var vias []string
	for s := first; s <= l.head && len(ents) < max; s++ {
		ents = append(ents, l.ring[(s-1)%uint64(l.size)])
	}
	done = first+uint64(len(ents)) > l.head
	vias = l.vias
	l.mu.Unlock()
	for i, e := range ents {
		ev, ok, err := r.n.rebuild(ctx, e, vias[e.via])
		if err != nil {
			return evs, false, err
		}
		r.next = first + uint64(i) + 1
		if !ok {
			continue
		}
		ev.Seq, ev.Cursor = r.next-1, l.cursor(r.next-1)
		evs = append(evs, ev)
	}
	return evs, done, nil
}

// rebuild makes an accepted record's event again from the store, as
// Accept published it (less the cursor); ok is false when the record is
// no longer surfaced here.
func (n *Node) rebuild(ctx context.Context, e acceptEntry, via string) (AcceptedEvent, bool, error) {
	key := e.key()
	if key == "" || n.st.IsForgotten(key) || n.st.IsQuarantined(key) {
		return AcceptedEvent{}, false, nil
	}
	sr, err := n.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return AcceptedEvent{}, false, nil
	}
	if err != nil {
		return AcceptedEvent{}, false, fmt.Errorf("replaying %s: %w", key, err)
	}
	if sr.Meta.Quarantined || sr.Meta.Forgotten {
		return AcceptedEvent{}, false, nil
	}
	rec, err := cmb.Decode(sr.Raw)
	if err != nil {
		return AcceptedEvent{}, false, fmt.Errorf("replaying %s: stored record does not decode: %w", key, err)
	}
	ev := AcceptedEvent{
		Key: key, Source: sr.Meta.Source, CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt,
		Group: group.Normalize(rec.Group), Fields: FieldsView(&rec.Fields), Directed: e.flags&entryDirected != 0,
		Decision: DecisionDirected, Via: via,
	}
	if !ev.Directed {
		ev.Decision = DecisionImported
	}
	if e.flags&entryJudged != 0 {
		v, ok := n.verdict(key)
		if !ok {
			return AcceptedEvent{}, false, nil // purged with its record meanwhile
		}
		drift := v.Drift
		ev.Decision, ev.Drift, ev.Nearest, ev.Hidden = string(v.Decision), &drift, v.Nearest, n.Hidden(key)
	}
	return ev, true, nil
}
