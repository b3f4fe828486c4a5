package mesh_test

import (
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// slowServe paces what a member serves each peer to 512 KiB/s, so a
// catch-up of a few thousand records lasts seconds and can be watched.
func slowServe(c *mesh.Config) { c.ServeRate = 512 << 10 }

// onlyOnConnect leaves a member's catch-ups to those run on connect: the
// periodic round must not be what completes them.
func onlyOnConnect(c *mesh.Config) { c.CatchUpInterval = time.Hour }

// A late joiner bootstrapped to three members that hold the same 3,000
// records receives each record once, whichever peer it comes from, and
// shows its progress meanwhile: status's sync line (about 3,000 expected,
// from its peers), a sync-progress event as the sync begins (it may end
// within syncEvery: the peers' serve bursts cover it), and a last event
// when it ends.
// Before catch-ups shared what they fetch, it received every record once
// per peer.
func TestLateJoinerFetchesEachRecordOnce(t *testing.T) {
	const n = 3000
	a := newMember(t, "alpha", "a", nil, slowServe)
	b := newMember(t, "alpha", "b", []*member{a}, slowServe)
	c := newMember(t, "alpha", "c", []*member{a, b}, slowServe)
	waitPeers(t, 2, a, b, c)
	seed(t, n, a, b, c)

	// Subscribed before the mesh starts, so the sync's first event is seen
	// however soon the catch-up on connect begins.
	late := newMemberIn(t, t.TempDir(), "alpha", "late", nil, onlyOnConnect)
	var sub *events.Sub
	late.prep = func(n *node.Node) { sub = n.Events().Subscribe(1 << 14) } // room for every cmb-accepted too
	late.start([]*member{a, b, c})
	defer sub.Close()
	var seen node.SyncProgress
	eventually(t, 30*time.Second, "status shows the sync", func() bool {
		seen = late.n.Sync()
		return seen.Syncing && seen.Received > 0
	})
	t.Logf("while syncing: %+v", seen)
	if seen.Expected < n || seen.Expected > n+n/10 {
		t.Errorf("sync expects %d records, want about %d", seen.Expected, n)
	}
	if st := late.n.Status(); st.Sync == nil || !st.Sync.Syncing {
		t.Errorf("status has no sync while syncing: %+v", st.Sync)
	}
	eventually(t, 60*time.Second, "the late joiner holds every record", func() bool { return late.n.Store().Count() >= n })
	eventually(t, 10*time.Second, "the sync ends", func() bool { return !late.n.Sync().Syncing })

	var progress, final int
	deadline := time.After(5 * time.Second)
	for final == 0 {
		select {
		case e := <-sub.C:
			if e.Name != events.SyncProgress {
				continue
			}
			if p := e.Data.(node.SyncProgress); p.Syncing {
				progress++
			} else if p.Received >= n {
				final++
			}
		case <-deadline:
			t.Fatalf("%d sync-progress events while syncing, and no final one", progress)
		}
	}
	if progress == 0 {
		t.Error("no sync-progress event while syncing")
	}

	s := late.n.Counters.Snapshot()
	t.Logf("late joiner: received %d, accepted %d, duplicates %d, caught up %d for %d records", s.Received, s.Accepted, s.Duplicates, s.CaughtUp, n)
	if s.Received != n || s.Duplicates != 0 {
		t.Errorf("the late joiner received %d records (%d duplicates) for %d new, want each once", s.Received, s.Duplicates, n)
	}
}

// A late joiner whose peer goes away mid-catch-up still receives every
// record from the others, without waiting for a periodic round, and
// receives at most one fetch batch twice.
func TestLateJoinerCompletesWhenAPeerLeaves(t *testing.T) {
	const n = 3000
	a := newMember(t, "alpha", "a", nil, slowServe)
	b := newMember(t, "alpha", "b", []*member{a}, slowServe)
	waitPeers(t, 1, a, b)
	seed(t, n, a, b)

	late := newMember(t, "alpha", "late", []*member{a, b}, onlyOnConnect)
	waitPeers(t, 2, late)
	eventually(t, 30*time.Second, "the catch-up is under way", func() bool { return late.n.Store().Count() >= n/5 })
	a.stop()
	at := late.n.Store().Count()
	eventually(t, 60*time.Second, "the late joiner holds every record", func() bool { return late.n.Store().Count() >= n })
	s := late.n.Counters.Snapshot()
	t.Logf("peer left at %d records; late joiner received %d, duplicates %d for %d records", at, s.Received, s.Duplicates, n)
	if s.Received > n+128 {
		t.Errorf("the late joiner received %d records for %d new", s.Received, n)
	}
}
