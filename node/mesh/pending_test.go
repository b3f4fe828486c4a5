package mesh

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testPending is a pending set over a real node, on a mesh with no peers,
// on a clock the test moves.
func testPending(t testing.TB, cfg Config) (*pending, *testClock) {
	t.Helper()
	home := t.TempDir()
	id, err := identity.Create(home, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "alpha", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cfg.defaults()
	m := &Mesh{cfg: cfg, n: n, log: slog.New(slog.DiscardHandler), claims: newClaims()}
	c := &testClock{t: time.Now()}
	p := newPending(m)
	p.now = c.now
	m.pending = p
	return p, c
}

func randomKey(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "cmb1-" + hex.EncodeToString(b)
}

// A parent nobody serves is asked for with doubling gaps up to
// PendingRetryMax, a dozen times in its PendingTTL rather than once a
// minute for ever, and then dropped as expired. Between retries nothing is
// due: run sleeps.
func TestPendingBacksOffAndExpires(t *testing.T) {
	ctx := context.Background()
	p, c := testPending(t, Config{})
	p.add([]string{randomKey(t)}, "author", "", 1)
	start := c.now()
	var gaps []time.Duration
	last := start
	for {
		d, ok := p.next()
		if !ok {
			break
		}
		c.advance(max(d, 0))
		before := p.m.stats.parentFetches.Load()
		p.round(ctx)
		if p.m.stats.parentFetches.Load() > before {
			gaps = append(gaps, c.now().Sub(last))
			last = c.now()
		}
		if c.now().Sub(start) > 2*time.Hour {
			t.Fatalf("the parent is still pending after %s", c.now().Sub(start))
		}
	}
	t.Logf("attempts at gaps %v; dropped %v", gaps, p.m.stats.pendingDropped.snapshot())
	if len(gaps) < 5 || len(gaps) > 16 {
		t.Errorf("%d attempts in the parent's life, want 5..16", len(gaps))
	}
	for i := 2; i < len(gaps); i++ {
		if gaps[i] < gaps[i-1] {
			t.Errorf("gap %d (%s) is shorter than the one before (%s)", i, gaps[i], gaps[i-1])
		}
	}
	if g := gaps[len(gaps)-1]; g > p.m.cfg.PendingRetryMax {
		t.Errorf("last gap %s exceeds PendingRetryMax %s", g, p.m.cfg.PendingRetryMax)
	}
	if life := c.now().Sub(start); life < p.m.cfg.PendingTTL || life > p.m.cfg.PendingTTL+p.m.cfg.PendingRetryMax {
		t.Errorf("dropped after %s, want within PendingRetryMax after the %s TTL", life, p.m.cfg.PendingTTL)
	}
	if p.Len() != 0 || p.m.stats.pendingDropped.snapshot()[pendingExpired] != 1 {
		t.Errorf("after the TTL: %d pending, dropped %v; want none pending, 1 expired", p.Len(), p.m.stats.pendingDropped.snapshot())
	}
}

// Each author's records may hold PendingPerAuthor missing parents; another
// author's still get theirs queued, and a key that is done leaves room.
func TestPendingPerAuthorCap(t *testing.T) {
	p, _ := testPending(t, Config{PendingPerAuthor: 3})
	var flood []string
	for range 5 {
		flood = append(flood, randomKey(t))
	}
	p.add(flood, "flooder", "", 1)
	p.add([]string{randomKey(t), randomKey(t)}, "honest", "", 1)
	if n := p.Len(); n != 5 {
		t.Errorf("%d pending, want 3 of the flooder's and 2 of the honest author's", n)
	}
	if d := p.m.stats.pendingDropped.snapshot()[pendingAuthorCap]; d != 2 {
		t.Errorf("%d dropped at the author cap, want 2", d)
	}
	p.done(flood[0])
	p.add(flood[3:4], "FLOODER", "", 1) // authors compare as nodeIds do
	if n := p.Len(); n != 5 {
		t.Errorf("%d pending after one was done and another added, want 5", n)
	}
	if p.byAuthor["flooder"] != 3 || p.queue.Len() != 5 {
		t.Errorf("flooder holds %d, queue %d; want 3 and 5", p.byAuthor["flooder"], p.queue.Len())
	}
}

// fillPending queues n parents from 100 authors, already retried long
// enough that none is due for PendingRetryMax: what a node holds after an
// orphan flood.
func fillPending(b *testing.B, p *pending, c *testClock, n int) {
	b.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = randomKey(b)
	}
	for i := 0; i < n; i += n / 100 {
		p.add(keys[i:min(i+n/100, n)], fmt.Sprint("author-", i), "", 1)
	}
	p.mu.Lock()
	for _, w := range p.items {
		w.attempts, w.due = 12, c.now().Add(p.m.cfg.PendingRetryMax)
	}
	heap.Init(&p.queue)
	p.mu.Unlock()
}

// BenchmarkPendingIdleRound is what a wake of the retry loop costs while
// 100,000 parents wait and none is due.
func BenchmarkPendingIdleRound(b *testing.B) {
	p, c := testPending(b, Config{PendingPerAuthor: 1000})
	fillPending(b, p, c, 100_000)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		p.round(ctx)
		p.next()
	}
}

// BenchmarkPendingIdleCPU runs the retry loop for a second of wall time per
// iteration while 100,000 parents wait and none is due, and reports the
// process CPU it used (cpu-%).
func BenchmarkPendingIdleCPU(b *testing.B) {
	p, c := testPending(b, Config{PendingPerAuthor: 1000})
	fillPending(b, p, c, 100_000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	time.Sleep(500 * time.Millisecond) // the node's own start-up work settles
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	c0, t0 := cpu(), time.Now()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.ReportMetric(100*float64(cpu()-c0)/float64(time.Since(t0)), "cpu-%")
	b.StopTimer()
	cancel()
	<-done
}
