package daemon

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// gcSettings reads the runtime's GOGC and memory limit as they are now.
func gcSettings() (percent int64, limit uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), s[1].Value.Uint64()
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitGC waits until the runtime's GOGC is percent (the daemon changes it
// on its own goroutine).
func waitGC(t *testing.T, percent int64, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, _ := gcSettings()
		if p == percent {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: GOGC %d, want %d", what, p, percent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// withGC runs the test under the given settings and puts the process's
// back after it.
func withGC(t *testing.T, percent int, limit int64) {
	t.Helper()
	oldP := debug.SetGCPercent(percent)
	oldL := debug.SetMemoryLimit(limit)
	t.Cleanup(func() {
		debug.SetGCPercent(oldP)
		debug.SetMemoryLimit(oldL)
	})
}

// An idle daemon runs with GOGC off under a memory limit of what it holds
// plus GOGC's growth; a record restores the settings at once, and the end
// of its burst turns them off again; stopping restores them.
func TestIdleDaemonTurnsTheForcedCollectionOff(t *testing.T) {
	withGC(t, 100, math.MaxInt64)
	d := start(t, t.TempDir(), Options{IdleGC: true})
	waitGC(t, -1, "idle after start")
	held, live := memHeld()
	_, limit := gcSettings()
	if limit <= held || limit > held+max(live, minIdleMargin)+(1<<20) {
		t.Fatalf("idle memory limit %d, want above what is held (%d) by about the live heap (%d)", limit, held, live)
	}

	c := client(t, d.socket)
	if _, err := c.Remember(context.Background(), ipc.RememberArgs{Fields: map[string]any{"focus": "wakes the daemon"}}); err != nil {
		t.Fatal(err)
	}
	waitGC(t, 100, "after a record")
	if _, limit := gcSettings(); limit != math.MaxInt64 {
		t.Fatalf("memory limit %d after a record, want none (%d)", limit, int64(math.MaxInt64))
	}
	waitGC(t, -1, "idle after the burst")
	if err := d.shutdown(t); err != nil {
		t.Fatal(err)
	}
	if p, limit := gcSettings(); p != 100 || limit != math.MaxInt64 {
		t.Fatalf("after stop: GOGC %d, limit %d; want 100 and none", p, limit)
	}
}

// The user's settings are what is restored, a lower GOMEMLIMIT stands
// while idle, a larger GOGC allows a larger growth, and GOGC=off is left
// alone.
func TestIdleGCKeepsTheUsersSettings(t *testing.T) {
	t.Run("GOGC=off", func(t *testing.T) {
		withGC(t, -1, math.MaxInt64)
		g := newIdleGC()
		g.enter()
		if p, limit := gcSettings(); g.on || p != -1 || limit != math.MaxInt64 {
			t.Fatalf("GOGC=off: on %v, GOGC %d, limit %d; want it untouched", g.on, p, limit)
		}
		g.leave()
		if p, _ := gcSettings(); p != -1 {
			t.Fatalf("GOGC %d after leave, want -1", p)
		}
	})
	t.Run("GOMEMLIMIT", func(t *testing.T) {
		held, _ := memHeld()
		user := int64(held + 1<<20) // below any idle margin
		withGC(t, 100, user)
		g := newIdleGC()
		g.enter()
		if p, limit := gcSettings(); p != -1 || int64(limit) != user {
			t.Fatalf("idle: GOGC %d, limit %d; want -1 and the user's %d", p, limit, user)
		}
		g.leave()
		if p, limit := gcSettings(); p != 100 || int64(limit) != user {
			t.Fatalf("after leave: GOGC %d, limit %d; want 100 and %d", p, limit, user)
		}
	})
	t.Run("GOGC=400", func(t *testing.T) {
		withGC(t, 400, math.MaxInt64)
		runtime.GC()
		held, live := memHeld()
		g := newIdleGC()
		g.enter()
		_, limit := gcSettings()
		if want := held + max(4*live, minIdleMargin); limit < want-(1<<20) || limit > want+(1<<20) {
			t.Fatalf("idle limit %d at GOGC=400, want about %d (held %d, live %d)", limit, want, held, live)
		}
		g.leave()
		if p, limit := gcSettings(); p != 400 || limit != math.MaxInt64 {
			t.Fatalf("after leave: GOGC %d, limit %d; want 400 and none", p, limit)
		}
	})
}

// Allocating the idle margin brings a collection, as GOGC would: it is
// signalled, and idleness starts over only if the margin lasted.
func TestIdleGCCollectsOnceTheMarginIsAllocated(t *testing.T) {
	withGC(t, 100, math.MaxInt64)
	for _, tc := range []struct {
		name   string
		after  time.Duration
		onNext bool
	}{{"slow", 0, true}, {"fast", time.Hour, false}} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			g := newIdleGC()
			g.reenterAfter = tc.after
			g.enter()
			defer g.leave()
			_, limit := gcSettings()
			held, live := memHeld()
			if margin := max(live, minIdleMargin); limit < held || limit > held+2*margin {
				t.Fatalf("idle limit %d, want what is held (%d) and a margin of about %d", limit, held, margin)
			}
			before := gcCycles()
			// Up to ten times the margin, 1 MiB of garbage at a time; the
			// signal comes from the cleanup's goroutine, just after.
			var allocated uint64
			signalled := false
			for !signalled && allocated < 10*(limit-held) {
				b := make([]byte, 1<<20)
				b[0] = 1
				runtime.KeepAlive(b)
				allocated += 1 << 20
				select {
				case <-g.collectedWhileIdle():
					signalled = true
				default:
				}
			}
			if !signalled {
				select {
				case <-g.collectedWhileIdle():
				case <-time.After(10 * time.Second):
					t.Fatalf("%d MiB allocated over a margin of %d MiB, %d collections, none signalled", allocated>>20, (limit-held)>>20, gcCycles()-before)
				}
			}
			if gcCycles() == before {
				t.Fatal("signalled with no collection")
			}
			if on := g.afterCollection(); on != tc.onNext {
				t.Fatalf("idle after the collection: %v, want %v", on, tc.onNext)
			}
			p, _ := gcSettings()
			if want := map[bool]int64{true: -1, false: 100}[tc.onNext]; p != want {
				t.Fatalf("GOGC %d after the collection, want %d", p, want)
			}
			if tc.onNext {
				return
			}
			// Busy, the collections are still watched: one that comes
			// as slowly as the runtime's timer makes the daemon idle again.
			g.reenterAfter = 0
			runtime.GC()
			select {
			case <-g.collectedWhileIdle():
			case <-time.After(10 * time.Second):
				t.Fatal("a collection after a fast one was not signalled")
			}
			if !g.afterCollection() {
				t.Fatal("not idle again after a slow collection")
			}
			if p, _ := gcSettings(); p != -1 {
				t.Fatalf("GOGC %d idle again, want -1", p)
			}
		})
	}
}
