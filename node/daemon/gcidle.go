package daemon

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// idleGC turns the Go runtime's forced collection off while the daemon
// is idle. The runtime collects at least every two minutes
// (forcegcperiod), allocation or not, unless GOGC is off; on an idle
// daemon that collection finds nothing to free and marks the whole live
// heap (the text index) for nothing, the largest single cost of an idle
// daemon.
//
// While on, GOGC is off and the memory limit is what the process holds
// now plus the growth GOGC would allow (the live heap × GOGC/100), so
// allocating brings a collection at the same point GOGC would: only the
// timer is gone. The settings found (the user's GOGC and GOMEMLIMIT) are
// restored on leave, and a GOMEMLIMIT below the idle limit stands. With
// GOGC off already, it does nothing: there is no forced collection to
// skip.
//
// Every collection while on, or while watching after one, signals
// collected (through a cleanup on a sentinel object, so nothing polls):
// afterCollection then decides from how long the last one was ago. The
// settings are process-wide, so only a process that runs one daemon and
// nothing else turns this on (Options.IdleGC). All methods but the
// sentinel's cleanup run on the daemon's one trimming goroutine.
type idleGC struct {
	// reenterAfter: after a collection the daemon is idle (again) if the
	// last collection was at least this long before: allocating that
	// slowly, the runtime's timer would collect first (or nearly).
	reenterAfter time.Duration

	on       bool  // GOGC off, the idle limit set
	watching bool  // a sentinel is out: collections are seen
	percent  int   // the GOGC to restore
	limit    int64 // the memory limit to restore
	since    time.Time

	// gen names the current sentinel: one of an earlier round,
	// collected late, signals nothing.
	gen       atomic.Uint64
	collected chan struct{}
}

// forcedGCPeriod is the runtime's forcegcperiod (runtime/proc.go).
const forcedGCPeriod = 2 * time.Minute

// minIdleMargin is the least growth allowed before a collection, the
// runtime's own smallest heap goal (4 MiB at GOGC=100).
const minIdleMargin = 4 << 20

func newIdleGC() *idleGC {
	// A tenth short of the period: the forced collection comes a little
	// after two minutes from the end of the last one, which is seen late.
	return &idleGC{reenterAfter: forcedGCPeriod * 9 / 10, collected: make(chan struct{}, 1)}
}

// sentinel is collected by the first collection after it is dropped; it
// is larger than the tiny allocator's blocks, which free late.
type sentinel struct{ _ [64]byte }

// enter turns the forced collection off (idle from now).
func (g *idleGC) enter() {
	if g == nil || g.on {
		return
	}
	percent := debug.SetGCPercent(-1)
	if percent < 0 {
		return // GOGC=off: no forced collection to skip
	}
	limit := debug.SetMemoryLimit(-1)
	held, live := memHeld()
	margin := max(live*uint64(percent)/100, minIdleMargin)
	idle := limit
	if held+margin < uint64(limit) {
		idle = int64(held + margin)
	}
	debug.SetMemoryLimit(idle)
	g.on, g.percent, g.limit = true, percent, limit
	g.watch()
}

// watch sends out a sentinel: the next collection signals collected.
func (g *idleGC) watch() {
	g.watching, g.since = true, time.Now()
	// Drained after gen moves on: a late signal of the last round is
	// ignored by its sentinel's gen, one already sent is dropped here.
	gen := g.gen.Add(1)
	select {
	case <-g.collected:
	default:
	}
	runtime.AddCleanup(new(sentinel), func(gen uint64) {
		if g.gen.Load() == gen {
			select {
			case g.collected <- struct{}{}:
			default:
			}
		}
	}, gen)
}

// leave restores the settings enter found and stops watching (busy from
// now).
func (g *idleGC) leave() {
	if g == nil {
		return
	}
	if g.watching {
		g.gen.Add(1)
		g.watching = false
	}
	if g.on {
		g.on = false
		debug.SetGCPercent(g.percent)
		debug.SetMemoryLimit(g.limit)
	}
}

// collectedWhileIdle is signalled after a collection while on or
// watching (nil when off: never).
func (g *idleGC) collectedWhileIdle() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.collected
}

// afterCollection handles collectedWhileIdle. A collection while on
// means the idle margin was allocated: idleness starts over from the new
// live heap if that took reenterAfter, and otherwise ends (the process
// allocates too fast for the runtime's timer to matter) with the
// collections still watched; once they come as slowly again (the timer's
// own, on a daemon gone quiet after reads), idleness starts over. It
// reports whether the daemon is idle now.
func (g *idleGC) afterCollection() bool {
	if g == nil || !g.watching {
		return false
	}
	slow := time.Since(g.since) >= g.reenterAfter
	g.leave()
	if slow {
		g.enter() // with GOGC off, neither on nor watching: nothing to wait for
		return g.on
	}
	g.watch()
	return false
}

// memHeld is the memory the runtime holds from the system as the memory
// limit counts it (mapped, minus what was returned), and the live heap
// the last collection found.
func memHeld() (held, live uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64(), s[2].Value.Uint64()
}
