package ipc

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/events"
)

// floodResult is what one flood measured.
type floodResult struct {
	honest      []time.Duration // an honest client's remember round trips, sorted
	peakHeap    uint64          // peak Go heap allocated during the flood
	peakHeld    int64           // peak bytes the server held for its clients
	dropped     int64
	written     int64 // bytes the flooders managed to write
	honestFails int
}

func (r floodResult) pct(p float64) time.Duration {
	if len(r.honest) == 0 {
		return 0
	}
	return r.honest[int(p*float64(len(r.honest)-1))]
}

// flood seeds the store with records whose recall replies are large, then
// has clients connections that each write perClient bytes of recall
// requests (with ids, so they run concurrently) and never read a reply,
// while one honest client remembers honestN times, one at a time.
func flood(t testing.TB, ts *testServer, clients, perClient, honestN int, liveHeap bool) floodResult {
	t.Helper()
	ctx := ctxT(t)
	seed := dialClient(t, ts.path)
	text := strings.Repeat("flood payload text ", 200) // ~3.8 KB a field
	for i := range 40 {
		if _, err := seed.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprintf("flood %d %s", i, text), "issue": text}}); err != nil {
			t.Fatal(err)
		}
	}
	var req bytes.Buffer
	for i := 0; req.Len() < perClient; i++ {
		fmt.Fprintf(&req, `{"type":"recall","id":%d,"query":"flood payload","limit":40}`+"\n", i)
	}
	var res floodResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	conns := make([]net.Conn, 0, clients)
	for range clients {
		c, err := net.Dial("unix", ts.path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Sample the heap and the server's accounting while the flood runs;
	// with liveHeap, the heap's live part (after a collection).
	wg.Go(func() {
		var ms runtime.MemStats
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if liveHeap {
				runtime.GC()
			}
			runtime.ReadMemStats(&ms)
			mu.Lock()
			res.peakHeap = max(res.peakHeap, ms.HeapAlloc)
			res.peakHeld = max(res.peakHeld, ts.srv.Stats().HeldBytes)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	var fw sync.WaitGroup
	for _, c := range conns {
		fw.Go(func() {
			c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			n, _ := c.Write(req.Bytes()) // stops where the daemon stops reading
			mu.Lock()
			res.written += int64(n)
			mu.Unlock()
		})
	}
	time.Sleep(200 * time.Millisecond) // let the flood start
	hc, err := net.Dial("unix", ts.path)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	br := bufio.NewReader(hc)
	for i := range honestN {
		t0 := time.Now()
		hc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(hc, `{"type":"remember","fields":{"focus":"honest %d"}}`+"\n", i); err != nil {
			res.honestFails++
			break
		}
		line, err := br.ReadBytes('\n')
		if err != nil || !bytes.Contains(line, []byte(`"type":"result"`)) {
			t.Logf("honest request %d: %q %v", i, line, err)
			res.honestFails++
			continue
		}
		res.honest = append(res.honest, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
	fw.Wait()
	close(stop)
	wg.Wait()
	slices.Sort(res.honest)
	res.dropped = ts.srv.Stats().Dropped
	return res
}

// TestFloodOfClientsThatNeverRead: clients that write requests and never
// read the replies cannot make the daemon buffer without bound: it stops
// reading from a client whose replies it cannot deliver, keeps what it
// holds for all of them under its byte budget (dropping the worst
// offender first), and an honest client keeps being answered. Before the
// budget the server queued 1024 replies a client whatever their size (here
// over 200 MB of heap for 100 clients).
func TestFloodOfClientsThatNeverRead(t *testing.T) {
	const budget = 32 << 20
	ts := startServer(t, func(o *Options) { o.MaxHeldBytes = budget })
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	before.HeapInuse = before.HeapAlloc
	r := flood(t, ts, 100, 64<<10, 50, true)
	t.Logf("honest p50 %s p99 %s, fails %d; peak heap %d MB (before %d MB), peak held %d MB, dropped %d, flooders wrote %d MB",
		r.pct(0.5), r.pct(0.99), r.honestFails, r.peakHeap>>20, before.HeapInuse>>20, r.peakHeld>>20, r.dropped, r.written>>20)
	if r.honestFails > 0 || len(r.honest) != 50 {
		t.Fatalf("the honest client was not answered: %d failures, %d answers", r.honestFails, len(r.honest))
	}
	if r.peakHeld > budget+2*MaxMessage {
		t.Errorf("the server held %d bytes for its clients, over its budget of %d", r.peakHeld, budget)
	}
	// The heap also holds the store and the replies the workers are
	// encoding (a few MB each); what is bounded is that it does not grow
	// with what the flooders send.
	if grew := int64(r.peakHeap) - int64(before.HeapInuse); grew > 4*budget {
		t.Errorf("the live heap grew by %d MB during the flood, over 4× the %d MB budget", grew>>20, budget>>20)
	}
}

// BenchmarkFlood: 1,000 local clients write recall requests on the socket
// and never read, while an honest client remembers one record at a time.
// It reports the honest client's round trip (p50, p99) and the process's
// peak RSS (clients included: they run in this process, and hold little).
// Bounded: one flood per run, whatever b.N.
func BenchmarkFlood(b *testing.B) {
	for range b.N {
		ts := startServer(b, nil)
		r := flood(b, ts, 1000, 32<<10, 200, false)
		if r.honestFails > 0 {
			b.Fatalf("honest client failed %d times", r.honestFails)
		}
		b.ReportMetric(float64(r.pct(0.5).Microseconds())/1000, "honest-p50-ms")
		b.ReportMetric(float64(r.pct(0.99).Microseconds())/1000, "honest-p99-ms")
		b.ReportMetric(float64(r.peakHeld>>20), "peak-held-MB")
		b.ReportMetric(float64(r.dropped), "dropped")
		b.ReportMetric(float64(peakRSS()>>20), "peak-RSS-MB")
	}
}

// peakRSS is the process's peak resident set (VmHWM), 0 where unknown.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestFloodOfListenersThatNeverRead: listeners that never read their
// events are dropped (their queue on the bus overflows, or what the
// socket holds for them passes the budget), the events being written to
// them count against the byte budget, and an honest client keeps being
// answered throughout.
func TestFloodOfListenersThatNeverRead(t *testing.T) {
	const budget = 4 << 20
	ts := startServer(t, func(o *Options) { o.MaxHeldBytes = budget; o.EventQueue = 64 })
	const listeners = 300
	for range listeners {
		c, err := net.Dial("unix", ts.path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte(`{"type":"listen"}` + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every listener subscribed", func() bool { return ts.node.Events().Subscribers() == listeners })
	pad := strings.Repeat("x", 16<<10)
	var peakHeld int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ts.node.Events().Publish(events.Event{Name: events.CMBAccepted, Data: map[string]any{"seq": i, "pad": pad}})
			peakHeld = max(peakHeld, ts.srv.Stats().HeldBytes)
			time.Sleep(time.Millisecond)
		}
	})
	c := dialClient(t, ts.path)
	for i := range 50 {
		if _, err := c.Remember(ctxT(t), RememberArgs{Fields: map[string]any{"focus": fmt.Sprint("honest among listeners ", i)}}); err != nil {
			t.Fatalf("honest remember %d: %v", i, err)
		}
	}
	waitFor(t, "the listeners that never read are dropped", func() bool { return ts.node.Events().Subscribers() == 0 })
	close(stop)
	wg.Wait()
	t.Logf("peak held %d KB, dropped by the socket %d, by the bus %d", peakHeld>>10, ts.srv.Stats().Dropped, ts.node.Events().Dropped())
	if peakHeld > budget+MaxMessage {
		t.Errorf("the socket held %d bytes for its listeners, over its budget of %d", peakHeld, budget)
	}
}
