package mesh_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/node"
)

// A member stopped while its peers author 1,000 records (chains of remixes)
// holds all of them, with every parent, within 30 s of restarting.
func TestCatchUpAfterRestart(t *testing.T) {
	a := newMember(t, "alpha", "a", nil, nil)
	b := newMember(t, "alpha", "b", []*member{a}, nil)
	c := newMember(t, "alpha", "c", []*member{a, b}, nil)
	waitPeers(t, 2, a, b, c)
	c.stop()

	const perAuthor, chain = 500, 10
	var mu sync.Mutex
	var keys []string
	var wg sync.WaitGroup
	for _, au := range []*member{a, b} {
		wg.Go(func() {
			prev := ""
			for i := range perAuthor {
				var parents []string
				if i%chain != 0 {
					parents = []string{prev}
				}
				prev = au.remember(fmt.Sprintf("%s record %d", au.n.Identity().Name, i), parents, "")
				mu.Lock()
				keys = append(keys, prev)
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	start := time.Now()
	c.start([]*member{a, b})
	eventually(t, 30*time.Second, "restarted member holds all 1,000 records", func() bool {
		return c.n.Store().Count() == 2*perAuthor
	})
	t.Logf("caught up %d records in %s (caughtUp=%d, gossip-accepted=%d)", len(keys), time.Since(start).Round(time.Millisecond),
		c.n.Counters.CaughtUp.Load(), c.n.Counters.Accepted.Load())
	ctx := context.Background()
	for _, k := range keys {
		r, err := c.n.Store().GetLineage(ctx, k)
		if err != nil {
			t.Fatalf("record %s: %v", k, err)
		}
		missing, err := lineage.MissingParents(ctx, c.n.Store(), r.Parents)
		if err != nil || len(missing) > 0 {
			t.Fatalf("record %s lacks parents %v (%v)", k, missing, err)
		}
	}
}

// 20,000 records authored as fast as the API allows on one member all reach
// a second member (gossip, then catch-up for whatever gossip dropped).
func TestBurstDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000-record burst")
	}
	const total, writers = 20000, 32
	a := newMember(t, "alpha", "sender", nil, nil)
	b := newMember(t, "alpha", "receiver", []*member{a}, nil)
	waitPeers(t, 1, a, b)

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				var f cmb.Fields
				f[cmb.Focus].Text = fmt.Sprintf("burst record %d", i)
				if _, err := a.n.Remember(context.Background(), node.RememberInput{Fields: f}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	authored := time.Since(start)
	eventually(t, 120*time.Second, "receiver holds all 20,000", func() bool { return b.n.Store().Count() == total })
	s := b.n.Counters.Snapshot()
	t.Logf("authored %d in %s (%.0f/s); all delivered after %s; via gossip %d, catch-up %d; sender drops %v, receiver drops %v",
		total, authored.Round(time.Millisecond), total/authored.Seconds(), time.Since(start).Round(time.Millisecond),
		s.Accepted-s.CaughtUp-s.Fetched, s.CaughtUp, a.m.Stats().GossipDropped, b.m.Stats().GossipDropped)
}
