package mesh

import (
	"context"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

// claims are the keys some catch-up is fetching right now. Catch-ups with
// several peers run at once and list the same missing keys; a key claimed
// by one is left to it, so each missing record is fetched from one peer
// only. A claim is released once its fetch ended, stored or not: a catch-up
// that left a key to another waits for the release and fetches the key
// itself if it is still missing (the other peer went away, or served
// something that did not verify).
type claims struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed on release
}

func newClaims() *claims { return &claims{held: map[string]chan struct{}{}} }

// take claims the keys nobody holds and returns them with one release
// channel for the lot; taken are the keys another catch-up holds.
func (c *claims) take(keys []string) (mine []string, done chan struct{}, taken []string) {
	done = make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if _, ok := c.held[k]; ok {
			taken = append(taken, k)
			continue
		}
		c.held[k] = done
		mine = append(mine, k)
	}
	return mine, done, taken
}

// release ends the claims take made on keys with done.
func (c *claims) release(keys []string, done chan struct{}) {
	c.mu.Lock()
	for _, k := range keys {
		if c.held[k] == done {
			delete(c.held, k)
		}
	}
	c.mu.Unlock()
	close(done)
}

// wait returns once none of keys is claimed (or ctx ends).
func (c *claims) wait(ctx context.Context, keys []string) error {
	for _, k := range keys {
		c.mu.Lock()
		ch, ok := c.held[k]
		c.mu.Unlock()
		if !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// isHeld reports whether a catch-up is fetching key.
func (c *claims) isHeld(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[key]
	return ok
}

// syncTracker follows one sync: from the first catch-up that finds a
// difference to the end of the last one running. Received counts every
// record stored for the first time meanwhile (node.Counters.Accepted, any
// path); Expected is the most any running catch-up still expects on top of
// what had arrived when it began (what its peer's top-level buckets hold
// beyond ours), so two peers holding the same records are not counted twice.
type syncTracker struct {
	m       *Mesh
	mu      sync.Mutex
	active  map[*catchUp]int64 // running catch-ups → Accepted when each began
	start   time.Time
	base    int64 // Accepted when the sync began
	changed chan struct{}
}

// syncEvery is how often sync-progress is pushed while a sync runs.
const syncEvery = time.Second

func newSyncTracker(m *Mesh) *syncTracker {
	return &syncTracker{m: m, active: map[*catchUp]int64{}}
}

// join counts cu in the sync, starting one if none runs.
func (t *syncTracker) join(cu *catchUp) {
	acc := t.m.n.Counters.Accepted.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.active[cu]; ok {
		return
	}
	t.active[cu] = acc
	if len(t.active) > 1 {
		return
	}
	t.start, t.base = time.Now(), acc
	done := make(chan struct{})
	t.changed = done
	t.m.goRun(func(ctx context.Context) { t.announce(ctx, done) })
}

// leave ends cu's part; the sync ends with the last one.
func (t *syncTracker) leave(cu *catchUp) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.active[cu]; !ok {
		return
	}
	delete(t.active, cu)
	if len(t.active) == 0 {
		close(t.changed)
	}
}

// announce pushes sync-progress as the sync begins, so a listener learns
// of a sync shorter than syncEvery, then every syncEvery until it ends, then
// once more with its final count.
func (t *syncTracker) announce(ctx context.Context, end chan struct{}) {
	tick := time.NewTicker(syncEvery)
	defer tick.Stop()
	start := time.Now()
	if p := t.progress(); p.Syncing {
		t.m.n.Events().Publish(events.Event{Name: events.SyncProgress, Data: p})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-end:
			acc := t.m.n.Counters.Accepted.Load()
			t.mu.Lock()
			p := node.SyncProgress{Received: acc - t.base, Expected: acc - t.base, Elapsed: time.Since(start)}
			if len(t.active) > 0 { // a new sync began at once
				p = t.progressLocked(acc)
			}
			t.mu.Unlock()
			t.m.n.Events().Publish(events.Event{Name: events.SyncProgress, Data: p})
			return
		case <-tick.C:
			t.m.n.Events().Publish(events.Event{Name: events.SyncProgress, Data: t.progress()})
		}
	}
}

// progress is the sync's state now (Syncing false when none runs).
func (t *syncTracker) progress() node.SyncProgress {
	acc := t.m.n.Counters.Accepted.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.progressLocked(acc)
}

func (t *syncTracker) progressLocked(acc int64) node.SyncProgress {
	if len(t.active) == 0 {
		return node.SyncProgress{}
	}
	p := node.SyncProgress{Syncing: true, Received: acc - t.base, Peers: len(t.active), Elapsed: time.Since(t.start)}
	var left int64
	for cu, began := range t.active {
		left = max(left, cu.expected.Load()-(acc-began))
	}
	p.Expected = p.Received + left
	if p.Received > 0 && left > 0 {
		p.ETA = time.Duration(float64(p.Elapsed) * float64(left) / float64(p.Received))
	}
	return p
}

// Sync reports the catch-up in progress (node.Syncer).
func (m *Mesh) Sync() node.SyncProgress { return m.sync.progress() }
