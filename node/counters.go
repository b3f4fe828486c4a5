package node

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Counters are the node's monotonic counters, shown by status and exported
// as metrics.
type Counters struct {
	Authored     atomic.Int64 // records authored here
	Received     atomic.Int64 // records received from peers (every path)
	Accepted     atomic.Int64 // received records stored for the first time
	Duplicates   atomic.Int64 // received records already held
	Relayed      atomic.Int64 // valid records for another member, relayed only
	KeyConflicts atomic.Int64 // authors presenting a key other than the pinned one
	KeysReplaced atomic.Int64 // unconfirmed author keys a handshake replaced
	Quarantined  atomic.Int64 // records quarantined because their key was replaced
	Assertions   atomic.Int64 // other authors' records of held content, kept as assertions
	Fetched      atomic.Int64 // records obtained by cmb-fetch
	CaughtUp     atomic.Int64 // records obtained by catch-up
	// RosterExpired counts roster entries expired for authoring nothing
	// stored (PruneRoster).
	RosterExpired atomic.Int64

	mu       sync.Mutex
	rejected map[string]int64
}

// Active is signalled each time a record is authored or received here
// (Counters.Authored, Received), signals coalescing while none is taken, so
// one listener (the daemon's memory return) can wait for the next burst
// instead of polling the counters.
func (n *Node) Active() <-chan struct{} { return n.active }

// Loaded is closed once the start-up's work on the stored records is done
// (the text index holds them all).
func (n *Node) Loaded() <-chan struct{} { return n.st.TextsLoaded() }

func (n *Node) noteActive() {
	select {
	case n.active <- struct{}{}:
	default:
	}
}

func (c *Counters) reject(reason string) {
	c.mu.Lock()
	if c.rejected == nil {
		c.rejected = map[string]int64{}
	}
	c.rejected[reason]++
	c.mu.Unlock()
}

// CountReject records a rejection decided outside the node core (e.g. an
// oversized message refused by the transport).
func (c *Counters) CountReject(reason string) { c.reject(reason) }

// Rejected returns rejections by reason.
func (c *Counters) Rejected() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.rejected))
	for k, v := range c.rejected {
		out[k] = v
	}
	return out
}

// Snapshot is a point-in-time copy for status and metrics.
type Snapshot struct {
	Authored     int64            `json:"authored"`
	Received     int64            `json:"received"`
	Accepted     int64            `json:"accepted"`
	Duplicates   int64            `json:"duplicates"`
	Relayed      int64            `json:"relayed"`
	KeyConflicts int64            `json:"keyConflicts"`
	KeysReplaced int64            `json:"keysReplaced"`
	Quarantined  int64            `json:"quarantined"`
	Assertions   int64            `json:"assertions"`
	Fetched      int64            `json:"fetched"`
	CaughtUp     int64            `json:"caughtUp"`
	Rejected     map[string]int64 `json:"rejected"`
	RejectedAll  int64            `json:"rejectedTotal"`

	RosterExpired int64 `json:"rosterExpired"`
}

// Snapshot copies the counters.
func (c *Counters) Snapshot() Snapshot {
	s := Snapshot{
		Authored: c.Authored.Load(), Received: c.Received.Load(), Accepted: c.Accepted.Load(),
		Duplicates: c.Duplicates.Load(), Relayed: c.Relayed.Load(), KeyConflicts: c.KeyConflicts.Load(),
		KeysReplaced: c.KeysReplaced.Load(), Quarantined: c.Quarantined.Load(), Assertions: c.Assertions.Load(),
		Fetched: c.Fetched.Load(), CaughtUp: c.CaughtUp.Load(), Rejected: c.Rejected(),
		RosterExpired: c.RosterExpired.Load(),
	}
	for _, v := range s.Rejected {
		s.RejectedAll += v
	}
	return s
}

// RejectReasons lists reasons in a stable order.
func (s Snapshot) RejectReasons() []string {
	r := make([]string, 0, len(s.Rejected))
	for k := range s.Rejected {
		r = append(r, k)
	}
	sort.Strings(r)
	return r
}
