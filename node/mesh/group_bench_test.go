package mesh_test

import (
	"fmt"
	"math"
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

	pubsub "github.com/libp2p/go-libp2p-pubsub"

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
	// What the returning member received while catching up (its node is
	// new, so its counters are the catch-up's): records received by
	// any path, of which already held; holders is how many of the
	// members holding the missed records it was connected to at the end.
	backReceived, backDups int64
	holders                int
	// spread is the missed records members other than the returning one
	// and the holders caught up while it did (import mode only).
	spread int64
	// payload is the size of one CMB's export line (record and keys), the
	// bulk of its gossip message.
	payload int
}

func (f simFigures) String() string {
	return fmt.Sprintf("FIGURES nodes=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f dups_per_cmb=%.2f mb_per_node=%.1f mb_per_node_end=%.1f peers_per_node=%.1f missed=%d catchup_s=%.2f catchup_wall_s=%.1f back_received=%d back_dups=%d back_holders=%d spread=%d payload_b=%d",
		f.nodes, ms(f.p50), ms(f.p99), ms(f.max), f.dupsPerCMB, f.mbPerNode, f.mbPerNodeEnd, f.peersPerNode, f.missed, f.catchUp.Seconds(), f.catchUpWall.Seconds(),
		f.backReceived, f.backDups, f.holders, f.spread, f.payload)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// simRun is one simulated group run's set-up.
type simRun struct {
	nodes, missed int
	// settle is how long the group runs before it is measured.
	settle time.Duration
	// peerTarget, when not 0, is every member's PeerTarget (and its
	// connection manager then runs with the watermarks that follow).
	peerTarget int
	// noFlood turns GossipSub's flood publishing off.
	noFlood bool
	// gossip, when set, adjusts GossipSub's router parameters.
	gossip func(*pubsub.GossipSubParams)
	// fieldBytes, when not 0, fills each of a CMB's seven fields with
	// that many bytes of words (the standard CMB of make bench-delivery
	// is 300); 0 authors a short focus only.
	fieldBytes int
	// importTo, when not 0, is how many running members hold the missed
	// CMBs: they are written with the authors' meshes detached (nothing
	// is gossiped) and imported into the other holders through the
	// receive pipeline (node.Import: Check, then Accept, as a delivery
	// from a peer), and the returning member is bootstrapped to holders.
	// 0 gossips them to every member.
	importTo int
}

// runGroupSim runs, inside t's synctest bubble, a group of o.nodes real
// members on go-libp2p's simulated network: one-way link latency 20–100
// ms fixed per pair, 50 Mbit/s links, every 20th member on a slow
// 2 Mbit/s one. It measures, in simulated time (CPU is free in the
// bubble, so these are what the protocol and the links cost): delivery
// of 100 CMBs from random authors at 10/s to every member; the copies
// received beyond the first per CMB, summed over the group; the Go heap
// per member once formed; and the time a member back after missing
// o.missed CMBs takes to hold them all (also on the wall clock, where the
// whole group's CPU on this machine shows), with what it received to
// get them. wallNow is the real clock, read outside the bubble.
func runGroupSim(t *testing.T, o simRun, wallNow func() time.Time) simFigures {
	nodes, missed := o.nodes, o.missed
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
	var catchUp time.Duration
	if o.importTo > 0 {
		// Every member's periodic round falls at the same simulated times
		// (its ticker starts with it); at the first, 60 s in, the members
		// not holding the imported CMBs would fetch them from the holders,
		// the very deliveries import saves. The measured delivery ends
		// before that first round, and the returning member's catch-up is
		// the one on connect.
		catchUp = 10 * time.Minute
	}
	base := heapInuse()
	g := newSimGroup(t, simOptions{minLatency: 20 * time.Millisecond, maxLatency: 100 * time.Millisecond,
		linkBits: 50_000_000, slowBits: 2_000_000, slowEvery: 20, catchUp: catchUp,
		tune: func(c *mesh.Config) {
			if o.peerTarget > 0 {
				c.PeerTarget = o.peerTarget
			}
			if o.noFlood {
				mesh.DisableFloodPublish(c)
			}
			if o.gossip != nil {
				mesh.TuneGossipSub(c, o.gossip)
			}
		}})
	for i := range nodes {
		g.add(fmt.Sprintf("m%04d", i))
	}
	progress(fmt.Sprintf("%d members started", nodes))
	waitPeers(t, min(3, nodes-1), g.ms...)
	progress("every member has 3 peers")
	time.Sleep(o.settle) // peer exchange, GossipSub's mesh and the connection manager settle
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
	before := snapshotMembers(g.ms)
	stop := watch(g.ms)
	sent := map[string]time.Time{}
	author := map[string]int{}
	const count = 100
	for i := range count {
		a := g.rng.IntN(len(g.ms))
		t0 := time.Now()
		key := rememberSim(g, g.ms[a], fmt.Sprintf("sim note %d", i), o.fieldBytes)
		sent[key], author[key] = t0, a
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
	var all []lateArrival
	for i, arr := range stop() {
		for _, a := range arr {
			if t0, ok := sent[a.key]; ok {
				lat = append(lat, a.at.Sub(t0))
				all = append(all, lateArrival{member: i, author: author[a.key], key: a.key, after: a.at.Sub(t0), via: a})
			}
		}
	}
	logTail(t, g, all, before, snapshotMembers(g.ms), len(sent))
	if len(lat) == 0 {
		t.Fatal("no deliveries observed")
	}
	slices.Sort(lat)
	f.p50, f.p99, f.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	f.dupsPerCMB = float64(groupDups(g.ms)-dup0) / count
	progress(fmt.Sprintf("%d CMBs at every member: %s", count, f))

	away := g.ms[len(g.ms)/2]
	away.stop()
	want := count + missed
	var holders []*member
	if o.importTo > 0 {
		holders = importMissed(t, g, missed, o.importTo, o.fieldBytes, want, progress)
	} else {
		authors := g.running()[:min(20, len(g.running()))]
		for i := range missed {
			rememberSim(g, authors[i%len(authors)], fmt.Sprintf("missed %d", i), o.fieldBytes)
			if i%100 == 99 {
				time.Sleep(100 * time.Millisecond) // 1,000 CMBs/s across the group
			}
			if i%1000 == 999 {
				progress(fmt.Sprintf("%d missed CMBs written", i+1))
			}
		}
		for i, mb := range g.running() {
			if i%max(1, nodes/10) == 0 {
				progress(fmt.Sprintf("waiting for member %d of %d to hold the missed CMBs", i, nodes-1))
			}
			eventually(t, 30*time.Minute, "members hold every missed CMB", func() bool { return mb.n.Store().Count() >= want })
		}
		holders = g.running()
	}
	progress(fmt.Sprintf("%d members hold the missed CMBs", len(holders)))
	caught0 := map[*member]int64{}
	for _, mb := range g.running() {
		caught0[mb] = mb.n.Counters.CaughtUp.Load()
	}
	back, backWall := time.Now(), wallNow()
	if o.importTo > 0 {
		g.restartTo(away, holders[:min(3, len(holders))])
	} else {
		g.restart(away)
	}
	eventually(t, 30*time.Minute, "the returning member catches up", func() bool { return away.n.Store().Count() >= want })
	f.catchUp, f.catchUpWall = time.Since(back), wallNow().Sub(backWall)
	f.backReceived, f.backDups = away.n.Counters.Received.Load(), away.n.Counters.Duplicates.Load()
	held := map[string]bool{}
	for _, h := range holders {
		held[h.id] = true
	}
	for _, p := range away.m.Peers() {
		if held[p.NodeID] {
			f.holders++
		}
	}
	if o.importTo > 0 {
		for mb, c0 := range caught0 {
			if !held[mb.id] && mb.m != nil {
				f.spread += mb.n.Counters.CaughtUp.Load() - c0
			}
		}
	}
	progress(fmt.Sprintf("caught up: received %d (%d already held) from %d peers, %d of them holders", f.backReceived, f.backDups, away.m.PeerCount(), f.holders))
	f.payload = payloadSize(t, g.ms[0])
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
// set turns GossipSub's flood publishing off; CMBNODE_SIM_IDONTWANT sets
// GossipSub's IDONTWANT threshold in bytes ("off": never sent) and
// CMBNODE_SIM_D its mesh degree D (D_lo = D−1, D_hi = 2D);
// CMBNODE_SIM_FIELD_BYTES fills each CMB's seven fields with that many
// bytes; CMBNODE_SIM_IMPORT=K puts the missed CMBs on K members by import
// instead of gossip ("all": every running member; see simRun.importTo);
// CMBNODE_SIM_HEAP_PROFILE names a file to write the heap profile to once
// the group has settled (and, with ".end" added, once the returning member
// has caught up).
func TestGroupSimFigures(t *testing.T) {
	o := simRun{
		nodes:      envInt(t, "CMBNODE_SIM_NODES", 10),
		missed:     envInt(t, "CMBNODE_SIM_MISSED", 300),
		settle:     time.Duration(envInt(t, "CMBNODE_SIM_SETTLE_S", 5)) * time.Second,
		noFlood:    os.Getenv("CMBNODE_SIM_NO_FLOOD") != "",
		fieldBytes: envIntOr0(t, "CMBNODE_SIM_FIELD_BYTES"),
		peerTarget: envIntOr0(t, "CMBNODE_SIM_PEER_TARGET"),
	}
	if os.Getenv("CMBNODE_SIM_IMPORT") == "all" {
		o.importTo = o.nodes - 1
	} else {
		o.importTo = envIntOr0(t, "CMBNODE_SIM_IMPORT")
	}
	threshold, d := os.Getenv("CMBNODE_SIM_IDONTWANT"), envIntOr0(t, "CMBNODE_SIM_D")
	if threshold != "" || d > 0 {
		idw := 0
		if threshold == "off" {
			idw = math.MaxInt32 // larger than any message GossipSub accepts
		} else if threshold != "" {
			idw = envInt(t, "CMBNODE_SIM_IDONTWANT", 0)
		}
		o.gossip = func(p *pubsub.GossipSubParams) {
			if idw > 0 {
				p.IDontWantMessageThreshold = idw
			}
			if d > 0 {
				p.D, p.Dlo, p.Dhi = d, max(p.Dout+1, d-1), 2*d
			}
		}
	}
	synctest.Test(t, func(t *testing.T) {
		f := runGroupSim(t, o, wallClock)
		t.Log(f.String())
	})
}

// envIntOr0 is envInt with 0 when name is unset.
func envIntOr0(t testing.TB, name string) int {
	if os.Getenv(name) == "" {
		return 0
	}
	return envInt(t, name, 0)
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
