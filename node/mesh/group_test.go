package mesh_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cmbnode/cmbnode/node/mesh"
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

// logPeers logs how many members each running member is connected to.
func logPeers(t *testing.T, g *simGroup) {
	t.Helper()
	lo, hi, sum := 1<<30, 0, 0
	rs := g.running()
	for _, mb := range rs {
		n := mb.m.PeerCount()
		lo, hi, sum = min(lo, n), max(hi, n), sum+n
	}
	t.Logf("members connected per member: min %d, mean %.1f, max %d", lo, float64(sum)/float64(len(rs)), hi)
}

// A group of 100 real members (node + badger store + mesh, private group)
// on a simulated network with 10–50 ms links, each bootstrapped to three
// others, each keeping the default PeerTarget: every CMB reaches every
// member, a member offline while 10 CMBs were written catches up on
// return, and with 10 members leaving and 10 joining while CMBs are
// written every member holds every CMB at the end. Time is synctest's: deadlines
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
		logPeers(t, g)

		// A member offline while 10 CMBs are written catches up on return.
		away := g.ms[42]
		away.stop()
		for i := range 10 {
			keys = append(keys, g.ms[(i*13)%40].remember(fmt.Sprintf("while m42 was away %d", i), nil, ""))
		}
		time.Sleep(2 * time.Second)
		g.restart(away)
		waitAllHold(t, g, keys, "offline member back")

		// Churn during traffic: while 40 CMBs are written at 10 a second,
		// 10 members leave and then 10 new ones join; every member running
		// at the end, the newcomers too, holds every CMB.
		var gone []*member
		for i := range 40 {
			switch {
			case i >= 10 && i < 20:
				leaver := g.ms[50+i] // m60..m69, none of them an author below
				leaver.stop()
				gone = append(gone, leaver)
			case i >= 20 && i < 30:
				g.add(fmt.Sprintf("n%02d", i-20))
			}
			keys = append(keys, g.ms[(i*7)%40].remember(fmt.Sprintf("during churn %d", i), nil, ""))
			time.Sleep(100 * time.Millisecond)
		}
		waitAllHold(t, g, keys, "after churn")
		logPeers(t, g)
		for _, mb := range gone {
			if mb.m != nil {
				t.Fatalf("a member that left is running")
			}
		}
		if n := len(g.running()); n != 100 {
			t.Fatalf("%d members running, want 100", n)
		}
	})
}

// In a group of 60 members with a PeerTarget of 8 (connection manager
// 8/12), no member stays connected to more members than the connection
// manager's high-water mark plus the bootstrap peers it keeps or that
// keep it (protected at the dialling end, so they come back after a
// trim) plus a slack for connections still in their grace period; the
// group is a partial mesh (a full mesh gave 38–58 per member here), and
// every CMB still reaches every member over it.
func TestGroupPartialMesh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const target = 8
		g := newSimGroup(t, simOptions{minLatency: 10 * time.Millisecond, maxLatency: 50 * time.Millisecond, linkBits: 20_000_000,
			tune: func(c *mesh.Config) { c.PeerTarget = target }})
		for i := range 60 {
			g.add(fmt.Sprintf("p%02d", i))
		}
		waitPeers(t, 3, g.ms...)
		// The connection manager trims only connections older than its
		// one-minute grace period, checking every 10 s.
		time.Sleep(2 * time.Minute)
		high := target + target/2 // ConnHigh when only PeerTarget is set
		// A member trimmed away by one peer dials another within the
		// connection manager's grace period, which spares it a minute.
		const slack = target / 2
		sum := 0
		for _, mb := range g.ms {
			n, bound := mb.m.PeerCount(), high+g.kept(mb)+slack
			if n > bound {
				t.Errorf("%s: connected to %d members, want at most %d (high-water %d + %d bootstrap links + %d)", mb.n.Identity().Name, n, bound, high, g.kept(mb), slack)
			}
			sum += n
		}
		logPeers(t, g)
		if mean := float64(sum) / float64(len(g.ms)); mean > 2*target {
			t.Errorf("mean %.1f members connected per member, want a partial mesh (at most %d)", mean, 2*target)
		}

		var keys []string
		for i := range 30 {
			keys = append(keys, g.ms[(i*17)%len(g.ms)].remember(fmt.Sprintf("partial mesh note %d", i), nil, ""))
		}
		waitAllHold(t, g, keys, "delivery over the partial mesh")
	})
}
