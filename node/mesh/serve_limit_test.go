package mesh_test

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// answers counts what the victim sends the rogue, by frame type, while
// answering its pings so the session stays up.
type answers struct {
	mu      sync.Mutex
	bytes   map[string]int64
	largest map[string]int
	count   map[string]int
}

func (r *rogue) countAnswers() *answers {
	a := &answers{bytes: map[string]int64{}, largest: map[string]int{}, count: map[string]int{}}
	go func() {
		for {
			_ = r.s.SetReadDeadline(time.Now().Add(time.Minute))
			p, err := cmb.ReadFrame(r.s, nil)
			if err != nil {
				return
			}
			var head struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(p, &head)
			if head.Type == cmb.TypePing {
				pp, _ := cmb.MarshalFrame(&cmb.Pong{})
				_ = cmb.WriteFrame(r.s, pp)
			}
			a.mu.Lock()
			a.bytes[head.Type] += int64(len(p))
			a.largest[head.Type] = max(a.largest[head.Type], len(p))
			a.count[head.Type]++
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *answers) get(typ string) (bytes int64, largest, count int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes[typ], a.largest[typ], a.count[typ]
}

// A member turned rogue floods the victim with catch-up requests: digests
// at the finest width over all time (one bucket per record it holds) and
// fetches of the same 512 keys over and over. Each answer stays within its
// cap, the answers the rogue gets stay within the per-peer budget (here
// 1 MiB/s, and a 1 MiB burst), the limit is counted — while honest gossip keeps
// arriving and a member joining during the attack catches up from the
// victim in full. Before the caps, one digest request of ~100 bytes was
// answered with ~300 KB and the rogue drew whatever the victim could send.
func TestCatchUpRequestFloodBounded(t *testing.T) {
	const held = 3000
	// A budget a slow machine (or the race detector) still overruns, so
	// the limit is always hit; the default is four times more.
	const serveRate = 1 << 20
	victim := newMember(t, "alpha", "victim", nil, func(c *mesh.Config) { c.ServeRate = serveRate })
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	keys := seed(t, held, victim, honest)

	r := newRogue(t)
	r.dial(victim)
	r.join("alpha")
	got := r.countAnswers()
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == 2 })
	halt := honestTraffic(t, honest)

	digest := []byte(fmt.Sprintf(`{"type":"x-cmbnode-digest-req","reqId":"d","from":0,"to":%d,"width":1000}`, int64(math.MaxInt64)))
	ask := make([]string, 512)
	for i := range ask {
		ask[i] = keys[i%64] // repeated keys: the same records over and over
	}
	fetch, _ := json.Marshal(map[string]any{"type": "x-cmbnode-fetch-many", "reqId": "f", "keys": ask})

	var sent atomic.Int64
	const flood = 4 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; time.Since(start) < flood; i++ {
			p := digest
			if i%2 == 1 {
				p = fetch
			}
			_ = r.s.SetWriteDeadline(start.Add(flood + time.Second))
			if err := cmb.WriteFrame(r.s, p); err != nil {
				return // the victim stopped reading us: its backpressure
			}
			sent.Add(int64(len(p) + 4))
		}
	})

	// A member that joins during the attack, bootstrapped to the victim.
	late := newMember(t, "alpha", "late", []*member{victim}, nil)
	wg.Wait()
	elapsed := time.Since(start)
	dBytes, dLargest, dCount := got.get("x-cmbnode-digest")
	rBytes, rLargest, rCount := got.get("x-cmbnode-records")
	s := victim.m.Stats()
	t.Logf("in %s the rogue sent %d bytes of requests and got %d digest answers (%d bytes, largest %d) and %d record answers (%d bytes, largest %d): %.1f× what it sent; victim throttled %d answers, truncated %d",
		elapsed.Round(time.Millisecond), sent.Load(), dCount, dBytes, dLargest, rCount, rBytes, rLargest,
		float64(dBytes+rBytes)/float64(max(sent.Load(), 1)), s.ServeThrottled, s.ServeTruncated)

	if dCount == 0 || rCount == 0 {
		t.Fatalf("the victim answered %d digest and %d fetch requests, want some of each", dCount, rCount)
	}
	if dLargest > 8<<10 {
		t.Errorf("a digest answer was %d bytes, want at most 8 KiB", dLargest)
	}
	if rLargest > 300<<10 {
		t.Errorf("a records answer was %d bytes, want at most 300 KiB", rLargest)
	}
	// Everything the rogue received by now left within the budget: the
	// burst, plus the rate over the flood and the second after it.
	budget := float64(cmb.MaxFrameSize) + serveRate*(time.Since(start).Seconds())
	if total := float64(dBytes + rBytes); total > budget {
		t.Errorf("the rogue drew %.0f bytes of answers in %s, over the budget of %.0f", total, time.Since(start).Round(time.Millisecond), budget)
	}
	if s.ServeThrottled == 0 || s.ServeTruncated == 0 {
		t.Errorf("the limits were not counted: throttled %d, truncated %d", s.ServeThrottled, s.ServeTruncated)
	}
	victim.storesAll(t, halt())
	eventually(t, 60*time.Second, "the member that joined during the attack holds every seeded record", func() bool {
		return late.n.Store().Count() >= held
	})
}
