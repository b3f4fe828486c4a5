package mesh_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// cluster starts n members of one group, each bootstrapped to all before it.
func cluster(b *testing.B, n int, tune func(*mesh.Config)) []*member {
	var ms []*member
	for i := range n {
		ms = append(ms, newMember(b, "bench", fmt.Sprintf("n%d", i), ms, tune))
	}
	waitPeers(b, n-1, ms...)
	time.Sleep(1500 * time.Millisecond) // let GossipSub graft its mesh
	return ms
}

// paced authors count records on src at rate per second (each Remember in
// its own goroutine, so a slow fsync does not hold the pace) and returns
// when each key was handed to Remember.
func paced(b *testing.B, src *member, count int, rate float64) (map[string]time.Time, *sync.Mutex) {
	sent := make(map[string]time.Time, count)
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range count {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			var f cmb.Fields
			f[cmb.Focus].Text = fmt.Sprintf("paced record %d at %d", i, time.Now().UnixNano())
			t0 := time.Now()
			res, err := src.n.Remember(context.Background(), node.RememberInput{Fields: f})
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			sent[res.Key] = t0
			mu.Unlock()
		})
	}
	wg.Wait()
	return sent, &mu
}

// arrival is one member's acceptance of a record: when, from which
// member (the deliverer's node ID) and by which path (gossip, fetch,
// catch-up).
type arrival struct {
	key, source, via string
	at               time.Time
}

// watch records when, from whom and how each receiver accepted each key.
func watch(ms []*member) (stop func() [][]arrival) {
	var wg sync.WaitGroup
	out := make([][]arrival, len(ms))
	done := make(chan struct{})
	for i, mb := range ms {
		sub := mb.n.Events().Subscribe(1 << 17)
		wg.Go(func() {
			defer sub.Close()
			for {
				select {
				case e := <-sub.C:
					if e.Name == events.CMBAccepted {
						a := e.Data.(node.AcceptedEvent)
						out[i] = append(out[i], arrival{key: a.Key, source: a.Source, via: a.Via, at: time.Now()})
					}
				case <-done:
					return
				}
			}
		})
	}
	return func() [][]arrival { close(done); wg.Wait(); return out }
}

// cpuTime is the CPU (user + system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLatency reports delivery latency and the CPU the whole process
// (every node: authoring, publishing, relaying, receiving, storing) spends
// per CMB authored; tune picks a public or a private group.
func benchLatency(b *testing.B, nodes int, tune func(*mesh.Config)) {
	const count, rate = 2000, 1000.0
	ms := cluster(b, nodes, tune)
	b.ResetTimer()
	var all []time.Duration
	var cpu time.Duration
	authored := 0
	for range b.N {
		cpu0 := cpuTime(b)
		base := make([]int, len(ms))
		for i, mb := range ms {
			base[i] = mb.n.Store().Count()
		}
		stop := watch(ms[1:])
		sent, _ := paced(b, ms[0], count, rate)
		for i, mb := range ms[1:] {
			eventually(b, 60*time.Second, "all paced records delivered", func() bool { return mb.n.Store().Count() >= base[i+1]+len(sent) })
		}
		cpu += cpuTime(b) - cpu0
		authored += len(sent)
		for _, arr := range stop() {
			for _, a := range arr {
				if t0, ok := sent[a.key]; ok {
					all = append(all, a.at.Sub(t0))
				}
			}
		}
	}
	b.StopTimer()
	slices.Sort(all)
	if len(all) == 0 {
		b.Fatal("no deliveries observed")
	}
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(authored), "cpu_us/cmb")
	b.ReportMetric(0, "ns/op")
}

// Delivery latency (Remember on one node → cmb-accepted on another) at
// 1,000 records/s paced, between 2 and between 5 nodes on loopback, in a
// private group (membership proofs, every CMB sealed) and in a public one
// (name-only, in clear): the difference is what group encryption costs.
func BenchmarkLatency2Nodes1000PerSec(b *testing.B)       { benchLatency(b, 2, nil) }
func BenchmarkLatency5Nodes1000PerSec(b *testing.B)       { benchLatency(b, 5, nil) }
func BenchmarkLatency2Nodes1000PerSecPublic(b *testing.B) { benchLatency(b, 2, public) }
func BenchmarkLatency5Nodes1000PerSecPublic(b *testing.B) { benchLatency(b, 5, public) }

// The highest paced rate at which gossip alone delivers every record
// (catch-up off, no GossipSub drop), trying doubling rates for 3 s each.
func BenchmarkMaxLosslessRate(b *testing.B) {
	tune := func(c *mesh.Config) { mesh.DisableCatchUp(c); c.PublishRate = 1e6; c.PublishBurst = 1e6 }
	best := 0.0
	for range b.N {
		for _, rate := range []float64{1000, 2000, 3000, 4000, 6000, 8000} {
			ms := cluster(b, 2, tune)
			count := int(rate * 3)
			start := time.Now()
			sent, _ := paced(b, ms[0], count, rate)
			achieved := float64(len(sent)) / time.Since(start).Seconds()
			deadline := time.Now().Add(10 * time.Second)
			for ms[1].n.Store().Count() < len(sent) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			got := ms[1].n.Store().Count()
			drops := ms[1].m.Stats().GossipDropped
			b.Logf("rate %.0f/s (achieved %.0f/s): delivered %d/%d, receiver drops %v", rate, achieved, got, len(sent), drops)
			for _, mb := range ms {
				mb.stop()
			}
			if got < len(sent) {
				break
			}
			best = max(best, min(rate, achieved))
		}
	}
	b.ReportMetric(best, "lossless_cmb/s")
	b.ReportMetric(0, "ns/op")
}

// Receiver ingest: the gossip receive path (Check, then Accept, with 32
// records in flight as the mesh's validators keep them) over records
// signed elsewhere, per core of GOMAXPROCS.
func BenchmarkReceiverIngest(b *testing.B) {
	author := newMember(b, "bench", "author", nil, mesh.DisableCatchUp)
	recv := newMember(b, "bench", "receiver", nil, mesh.DisableCatchUp)
	const n = 10000
	recs := make([]*cmb.Record, n)
	for i := range recs {
		var f cmb.Fields
		f[cmb.Focus].Text = fmt.Sprintf("ingest record %d", i)
		r, err := cmb.Build(cmb.Draft{Fields: f, Group: "bench", CreatedBy: author.nodeID(), CreatedAt: time.Now().UnixMilli()}, author.n.Identity().Ed25519)
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = r
	}
	pub := author.n.Identity().PublicKeyB64()
	b.ResetTimer()
	var busy time.Duration
	total := 0
	for range b.N {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 32 {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= n {
						return
					}
					c, err := recv.n.Check(context.Background(), recs[i], node.Source{PeerID: "bench", AuthorKey: pub, Via: "gossip"})
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := recv.n.Accept(context.Background(), c); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		busy += time.Since(start)
		total += n
		b.StopTimer()
		recv.stop() // a fresh store each round: every record is new
		recv = newMember(b, "bench", "receiver", nil, mesh.DisableCatchUp)
		b.StartTimer()
	}
	el := busy.Seconds()
	b.ReportMetric(float64(total)/el, "cmb/s")
	b.ReportMetric(float64(total)/el/float64(runtime.GOMAXPROCS(0)), "cmb/s/core")
	b.ReportMetric(0, "ns/op")
}

// A late joiner catching up 5,000 records from two and from three peers
// that hold them all: the time from its start to holding every record,
// and the records it received per new record (1.00 when no record is
// fetched twice).
func benchLateJoiner(b *testing.B, peers int) {
	const n = 5000
	ms := cluster(b, peers, nil)
	seed(b, n, ms...)
	b.ResetTimer()
	var took time.Duration
	var received, fresh int64
	for range b.N {
		start := time.Now()
		late := newMember(b, "bench", "late", ms, func(c *mesh.Config) { c.CatchUpInterval = time.Hour })
		eventually(b, 120*time.Second, "the late joiner holds every record", func() bool { return late.n.Store().Count() >= n })
		took += time.Since(start)
		s := late.n.Counters.Snapshot()
		received += s.Received
		fresh += s.Accepted
		b.StopTimer()
		late.stop()
		b.StartTimer()
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "catchup_s")
	b.ReportMetric(float64(received)/float64(fresh), "received/new")
	b.ReportMetric(float64(fresh)/took.Seconds(), "new_cmb/s")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkLateJoiner2Peers(b *testing.B) { benchLateJoiner(b, 2) }
func BenchmarkLateJoiner3Peers(b *testing.B) { benchLateJoiner(b, 3) }
