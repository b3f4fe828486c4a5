package daemon

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/cmbnode/cmbnode/node"
)

// trimEvery is how often the daemon looks whether a burst of records has
// ended, and trimQuiet how many looks must find no new record: past
// GossipSub's history of what it sent (5 heartbeats, 5 s), which the
// collection could not free before.
const (
	trimEvery = 2 * time.Second
	trimQuiet = 3
)

// trimAfterBursts gives memory back to the system once a burst of
// records (authored or received) is over: one full collection and the
// freed pages returned. Go collects only as the heap grows, and a daemon
// that goes quiet after a burst would otherwise keep the burst's garbage
// resident, twice what it holds, until the runtime's two-minute forced
// collection. It costs one collection per burst; between bursts it waits
// for the next record and never wakes. The start-up is a burst too (the
// text index built from the stored records leaves about as much garbage
// as it keeps): it is trimmed once loading ends. Between bursts the
// daemon is idle: with idle set, the runtime's forced collection is off
// then (idleGC).
func trimAfterBursts(ctx context.Context, n *node.Node, idle *idleGC) {
	afterBursts(ctx, n.Loaded(), n.Active(), func() int64 { return n.Counters.Authored.Load() + n.Counters.Received.Load() },
		trimEvery, debug.FreeOSMemory, idle)
}

// afterBursts calls trim once loaded is closed, then once per burst of
// activity: once active has signalled and activity() then stays the same
// for trimQuiet looks, every look apart. From each trim to the next
// signal the daemon is idle (idle.enter, idle.leave; idle may be nil).
func afterBursts(ctx context.Context, loaded, active <-chan struct{}, activity func() int64, every time.Duration, trim func(), idle *idleGC) {
	defer idle.leave()
	select {
	case <-ctx.Done():
		return
	case <-loaded:
		trim()
	}
	idle.enter()
	t := time.NewTicker(every)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.collectedWhileIdle():
			// Allocation, not records (a reader, a peer): the runtime
			// collected as GOGC would have; idle (again) unless it came
			// faster than the runtime's timer.
			idle.afterCollection()
			continue
		case <-active:
		}
		idle.leave()
		t.Reset(every)
		last := activity()
		for quiet := 0; quiet < trimQuiet; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Taken before the count is read: a record after the read
			// signals again, and starts the next round.
			select {
			case <-active:
			default:
			}
			now := activity()
			if now != last {
				quiet = 0
			} else {
				quiet++
			}
			last = now
		}
		t.Stop()
		trim()
		idle.enter()
	}
}
