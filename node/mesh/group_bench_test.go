package mesh_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cmbnode/cmbnode/node/mesh"
)

func envInt(b testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// simFigures are what one simulated group run measured.
type simFigures struct {
	nodes                   int
	p50, p99, max           time.Duration // authoring → accepted, every member
	dupsPerCMB              float64
	mbPerNode, peersPerNode float64
	mbPerNodeEnd            float64 // heap per member once every member holds every CMB
	catchUp, catchUpWall    time.Duration
	missed                  int
}

func (f simFigures) String() string {
	return fmt.Sprintf("FIGURES nodes=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f dups_per_cmb=%.2f mb_per_node=%.1f mb_per_node_end=%.1f peers_per_node=%.1f missed=%d catchup_s=%.2f catchup_wall_s=%.1f",
		f.nodes, ms(f.p50), ms(f.p99), ms(f.max), f.dupsPerCMB, f.mbPerNode, f.mbPerNodeEnd, f.peersPerNode, f.missed, f.catchUp.Seconds(), f.catchUpWall.Seconds())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runGroupSim runs, inside t's synctest bubble, a group of nodes real
// members on go-libp2p's simulated network: one-way link latency 20–100
// ms fixed per pair, 50 Mbit/s links, every 20th member on a slow
// 2 Mbit/s one. It measures, in simulated time (CPU is free in the
// bubble, so these are what the protocol and the links cost): delivery
// of 100 CMBs from random authors at 10/s to every member; the copies
// received beyond the first per CMB, summed over the group; the Go heap
// per member once formed; and the time a member back after missing
// `missed` CMBs takes to hold them all (also on the wall clock, where the
// whole group's CPU on this machine shows). wallNow is the real clock,
// read outside the bubble.
//
// settle is how long the group runs before it is measured; peerTarget,
// when not 0, is every member's PeerTarget (and its connection manager
// then runs with the watermarks that follow from it); noFlood turns
// GossipSub's flood publishing off.
func runGroupSim(t *testing.T, nodes, missed int, settle time.Duration, peerTarget int, noFlood bool, wallNow func() time.Time) simFigures {
	f := simFigures{nodes: nodes, missed: missed}
	// progress logs each phase with the simulated and the wall time
	// since the start: a run of 1,000 members takes most of an hour.
	sim0, wall0 := time.Now(), wallNow()
	progress := func(what string) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("progress: %s (simulated %v, wall %v; heap %d MB, stacks %d MB, %d goroutines)", what,
			time.Since(sim0).Round(time.Millisecond), wallNow().Sub(wall0).Round(time.Second),
			ms.HeapInuse>>20, ms.StackInuse>>20, runtime.NumGoroutine())
	}
	base := heapInuse()
	g := newSimGroup(t, simOptions{minLatency: 20 * time.Millisecond, maxLatency: 100 * time.Millisecond,
		linkBits: 50_000_000, slowBits: 2_000_000, slowEvery: 20,
		tune: func(c *mesh.Config) {
			if peerTarget > 0 {
				c.PeerTarget = peerTarget
			}
			if noFlood {
				mesh.DisableFloodPublish(c)
			}
		}})
	for i := range nodes {
		g.add(fmt.Sprintf("m%04d", i))
	}
	progress(fmt.Sprintf("%d members started", nodes))
	waitPeers(t, min(3, nodes-1), g.ms...)
	progress("every member has 3 peers")
	time.Sleep(settle) // peer exchange, GossipSub's mesh and the connection manager settle
	progress("settled")
	f.mbPerNode = float64(heapInuse()-base) / float64(nodes) / (1 << 20)
	if path := os.Getenv("CMBNODE_SIM_HEAP_PROFILE"); path != "" {
		writeHeapProfile(t, path)
	}
	peers := 0
	for _, mb := range g.ms {
		peers += mb.m.PeerCount()
	}
	f.peersPerNode = float64(peers) / float64(nodes)

	dup0 := groupDups(g.ms)
	stop := watch(g.ms)
	sent := map[string]time.Time{}
	const count = 100
	for i := range count {
		src := g.ms[g.rng.IntN(len(g.ms))]
		t0 := time.Now()
		sent[src.remember(fmt.Sprintf("sim note %d", i), nil, "")] = t0
		time.Sleep(100 * time.Millisecond)
	}
	keys := make([]string, 0, len(sent))
	for k := range sent {
		keys = append(keys, k)
	}
	for _, mb := range g.ms {
		eventually(t, 10*time.Minute, "every member holds every CMB", func() bool { return holdsAll(mb, keys) })
	}
	var lat []time.Duration
	for _, arr := range stop() {
		for _, a := range arr {
			if t0, ok := sent[a.key]; ok {
				lat = append(lat, a.at.Sub(t0))
			}
		}
	}
	if len(lat) == 0 {
		t.Fatal("no deliveries observed")
	}
	slices.Sort(lat)
	f.p50, f.p99, f.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	f.dupsPerCMB = float64(groupDups(g.ms)-dup0) / count
	progress(fmt.Sprintf("%d CMBs at every member: %s", count, f))

	away := g.ms[len(g.ms)/2]
	away.stop()
	authors := g.running()[:min(20, len(g.running()))]
	for i := range missed {
		authors[i%len(authors)].remember(fmt.Sprintf("missed %d", i), nil, "")
		if i%100 == 99 {
			time.Sleep(100 * time.Millisecond) // 1,000 CMBs/s across the group
		}
		if i%1000 == 999 {
			progress(fmt.Sprintf("%d missed CMBs written", i+1))
		}
	}
	want := count + missed
	for i, mb := range g.running() {
		if i%max(1, nodes/10) == 0 {
			progress(fmt.Sprintf("waiting for member %d of %d to hold the missed CMBs", i, nodes-1))
		}
		eventually(t, 30*time.Minute, "members hold every missed CMB", func() bool { return mb.n.Store().Count() >= want })
	}
	progress("every running member holds the missed CMBs")
	back, backWall := time.Now(), wallNow()
	g.restart(away)
	eventually(t, 30*time.Minute, "the returning member catches up", func() bool { return away.n.Store().Count() >= want })
	f.catchUp, f.catchUpWall = time.Since(back), wallNow().Sub(backWall)
	f.mbPerNodeEnd = float64(heapInuse()-base) / float64(nodes) / (1 << 20)
	if path := os.Getenv("CMBNODE_SIM_HEAP_PROFILE"); path != "" {
		writeHeapProfile(t, path+".end")
	}
	return f
}

// A small simulated group through the whole benchmark scenario (the
// bench runs it at scale): every CMB reaches every member and a member
// back after missing CMBs catches up. CMBNODE_SIM_NODES and
// CMBNODE_SIM_MISSED size it (default 10 members, 300 missed),
// CMBNODE_SIM_SETTLE_S is how long the group runs before it is measured
// (default 5 s, simulated) and CMBNODE_SIM_PEER_TARGET sets every
// member's PeerTarget (default mesh.DefaultPeerTarget); CMBNODE_SIM_NO_FLOOD
// set turns GossipSub's flood publishing off; CMBNODE_SIM_HEAP_PROFILE
// names a file to write the heap profile to once the group has settled
// (and, with ".end" added, once the returning member has caught up).
func TestGroupSimFigures(t *testing.T) {
	nodes := envInt(t, "CMBNODE_SIM_NODES", 10)
	missed := envInt(t, "CMBNODE_SIM_MISSED", 300)
	settle := time.Duration(envInt(t, "CMBNODE_SIM_SETTLE_S", 5)) * time.Second
	target := 0
	if os.Getenv("CMBNODE_SIM_PEER_TARGET") != "" {
		target = envInt(t, "CMBNODE_SIM_PEER_TARGET", 0)
	}
	synctest.Test(t, func(t *testing.T) {
		f := runGroupSim(t, nodes, missed, settle, target, os.Getenv("CMBNODE_SIM_NO_FLOOD") != "", wallClock)
		t.Log(f.String())
	})
}

// BenchmarkGroupSim runs TestGroupSimFigures in a child test process
// (synctest bubbles are for tests only) at CMBNODE_SIM_NODES members
// (default 100) and CMBNODE_SIM_MISSED missed CMBs (default 10,000), and
// reports its figures.
func BenchmarkGroupSim(b *testing.B) {
	nodes := envInt(b, "CMBNODE_SIM_NODES", 100)
	missed := envInt(b, "CMBNODE_SIM_MISSED", 10000)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		cmd := exec.Command(exe, "-test.run", "^TestGroupSimFigures$", "-test.v", "-test.timeout", "3h")
		cmd.Env = append(os.Environ(), fmt.Sprintf("CMBNODE_SIM_NODES=%d", nodes), fmt.Sprintf("CMBNODE_SIM_MISSED=%d", missed))
		var rss syscall.Rusage
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState != nil {
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				rss = *ru
			}
		}
		line := ""
		for l := range strings.Lines(string(out)) {
			if i := strings.Index(l, "FIGURES "); i >= 0 {
				line = strings.TrimSpace(l[i+len("FIGURES "):])
			}
		}
		if err != nil || line == "" {
			b.Fatalf("simulated group of %d: %v\n%s", nodes, err, tail(out, 4000))
		}
		b.Logf("%s max_rss_mb=%d", line, rss.Maxrss>>10)
		for kv := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(kv, "=")
			x, err := strconv.ParseFloat(v, 64)
			if err == nil && k != "nodes" && k != "missed" {
				b.ReportMetric(x, k)
			}
		}
		b.ReportMetric(float64(rss.Maxrss>>10)/float64(nodes), "rss_mb_per_node")
	}
	b.ReportMetric(0, "ns/op")
}

// writeHeapProfile writes the heap profile (in use since the last GC) to
// path, for go tool pprof -sample_index=inuse_space.
func writeHeapProfile(t testing.TB, path string) {
	fh, err := os.Create(path)
	if err != nil {
		t.Fatalf("heap profile: %v", err)
	}
	defer fh.Close()
	if err := pprof.Lookup("heap").WriteTo(fh, 0); err != nil {
		t.Fatalf("heap profile: %v", err)
	}
}

// wallClock reads the real clock, which a synctest bubble's time.Now
// does not.
func wallClock() time.Time {
	var tv syscall.Timeval
	_ = syscall.Gettimeofday(&tv)
	return time.Unix(tv.Sec, tv.Usec*1000)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// groupDups sums the duplicate deliveries the members saw.
func groupDups(ms []*member) int64 {
	var n int64
	for _, mb := range ms {
		if mb.m != nil {
			n += mb.m.Stats().GossipDuplicates + mb.n.Counters.Duplicates.Load()
		}
	}
	return n
}
