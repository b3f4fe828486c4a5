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
// collection. It costs one collection per burst, none while idle.
func trimAfterBursts(ctx context.Context, n *node.Node) {
	t := time.NewTicker(trimEvery)
	defer t.Stop()
	activity := func() int64 { return n.Counters.Authored.Load() + n.Counters.Received.Load() }
	last, quiet := activity(), trimQuiet
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := activity()
		if now != last {
			quiet = 0
		} else if quiet++; quiet == trimQuiet {
			debug.FreeOSMemory()
		}
		last = now
	}
}
