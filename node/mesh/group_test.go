package mesh_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// holdsAll reports whether mb's store holds every key.
func holdsAll(mb *member, keys []string) bool {
	if mb.n.Store().Count() < len(keys) {
		return false
	}
	for _, k := range keys {
		if !mb.has(k) {
			return false
		}
	}
	return true
}

// waitAllHold waits until every running member holds every key.
func waitAllHold(t *testing.T, g *simGroup, keys []string, what string) {
	t.Helper()
	start := time.Now()
	for _, mb := range g.running() {
		eventually(t, 5*time.Minute, fmt.Sprintf("%s: %s holds all %d records", what, mb.n.Identity().Name, len(keys)), func() bool {
			return holdsAll(mb, keys)
		})
	}
	t.Logf("%s: %d records at all %d members after %v (simulated)", what, len(keys), len(g.running()), time.Since(start))
}

// A group of 100 real members (node + badger store + mesh, private group)
// on a simulated network with 10–50 ms links, each bootstrapped to three
// others: every CMB reaches every member, and a member offline while 10
// CMBs were written catches up on return. Time is synctest's: deadlines
// bound a hang, they measure nothing.
func TestGroupOfHundred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newSimGroup(t, simOptions{minLatency: 10 * time.Millisecond, maxLatency: 50 * time.Millisecond, linkBits: 20_000_000})
		for i := range 100 {
			g.add(fmt.Sprintf("m%02d", i))
		}
		waitPeers(t, 3, g.ms...)

		// Every CMB reaches every member: 20 CMBs from 10 authors.
		var keys []string
		for i := range 20 {
			keys = append(keys, g.ms[(i*37)%len(g.ms)].remember(fmt.Sprintf("group note %d", i), nil, ""))
		}
		waitAllHold(t, g, keys, "delivery")

		// A member offline while 10 CMBs are written catches up on return.
		away := g.ms[42]
		away.stop()
		for i := range 10 {
			keys = append(keys, g.ms[(i*13)%40].remember(fmt.Sprintf("while m42 was away %d", i), nil, ""))
		}
		time.Sleep(2 * time.Second)
		g.restart(away)
		waitAllHold(t, g, keys, "offline member back")

		if n := len(g.running()); n != 100 {
			t.Fatalf("%d members running, want 100", n)
		}
	})
}
