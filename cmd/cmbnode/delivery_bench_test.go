package main

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
)

// The two-daemon delivery workload (issue #23): two real daemons on
// loopback in one public group, a driver on their sockets. The driver
// remembers standard CMBs (7 fields × 300 bytes) on the sender at a fixed
// open-loop rate, over several connections with ids, and listens on the
// receiver; a CMB is lost when its cmb-accepted event arrives more than
// 1 s after the moment it was scheduled to be sent (or never). Each step
// runs on a fresh pair.
//
// Environment:
//
//	CMBNODE_BENCH_STEP     step length (default 20s)
//	CMBNODE_BENCH_RATES    comma-separated rates to run instead of the ramp
//	                       and bisection (e.g. "1000,4000")
//	CMBNODE_BENCH_PROFILE  a directory: each daemon of each step writes a
//	                       CPU profile there (sender-RATE.pprof, receiver-RATE.pprof)
//	CMBNODE_BENCH_ANCHORS  "none": the receiver judges records against no
//	                       anchors (recent_anchors and nearest_anchors -1),
//	                       to see what SVAF admission costs
//	CMBNODE_BENCH_TRANSPORT "quic": both daemons listen on QUIC only
//	                       (default: TCP with Noise and yamux), to compare
//	                       the transports' cost on loopback
//	CMBNODE_BENCH_TRACE    a directory: each daemon of each step writes a Go
//	                       execution trace there (sender-RATE.trace, …)
//	CMBNODE_BENCH_TIMES    a directory: each step writes times-RATE.txt, one
//	                       line per CMB: its index, when it was scheduled (ms
//	                       after the step's start, whose Unix time in ns is
//	                       the first line), and how long after that its reply
//	                       and its cmb-accepted event came (ms, -1: never),
//	                       to see when the slow ones happen
//
// CPU per CMB is each daemon's process CPU time (utime+stime) over the
// step divided by the CMBs it remembered or accepted: on a shared machine
// it holds up better than the rates, which move with the load.

const (
	deliveryLossAfter = time.Second
	deliveryConns     = 4 // sender connections the driver spreads requests over
	fieldBytes        = 300
)

func benchStep() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CMBNODE_BENCH_STEP")); err == nil && d > 0 {
		return d
	}
	return 20 * time.Second
}

// deliveryStep is what one step measured.
type deliveryStep struct {
	rate          int
	sent, arrived int // remembered (answered ok), and arrived in time at the receiver
	lost          int
	failed        int // remember errors
	p50, p99, max time.Duration
	// replyP99 is the 99th percentile of the sender's answer (scheduled →
	// remember reply), the part of the latency before the record leaves.
	replyP99    time.Duration
	senderCPU   time.Duration
	receiverCPU time.Duration
	// Context switches of each daemon's threads over the step: every
	// hand-off that finds a thread asleep costs one, and on an idle
	// machine that wake-up's CPU shows in the figures above.
	senderSw, receiverSw int64
	// Time each daemon's threads spent runnable but waiting for a CPU
	// (schedstat): where it is a large share of the latency, the tail is
	// CPU contention (the machine's other load, or the three processes of
	// the bench among themselves), not a stall of the daemons' own.
	senderWait, receiverWait time.Duration
	accepted                 int // events the receiver's listener got
	stored                   int // records the receiver holds at the end (the probe included)
	listenerErr              string
}

func (s deliveryStep) ok() bool {
	return s.failed == 0 && s.lost == 0 && s.listenerErr == ""
}

func (s deliveryStep) String() string {
	st := "ok"
	if !s.ok() {
		st = fmt.Sprintf("FAIL lost %d failed %d %s", s.lost, s.failed, s.listenerErr)
	}
	return fmt.Sprintf("%5d/s: sent %d arrived %d (stored %d) p50 %.1f ms p99 %.1f ms max %.1f ms (reply p99 %.1f ms), CPU/CMB sender %.0f µs receiver %.0f µs, switches/CMB sender %.1f receiver %.1f, CPU wait/CMB sender %.0f µs receiver %.0f µs — %s",
		s.rate, s.sent, s.arrived, s.stored, ms(s.p50), ms(s.p99), ms(s.max), ms(s.replyP99), perCMB(s.senderCPU, s.sent), perCMB(s.receiverCPU, s.accepted),
		perN(s.senderSw, s.sent), perN(s.receiverSw, s.accepted), perCMB(s.senderWait, s.sent), perCMB(s.receiverWait, s.accepted), st)
}

func perN(k int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func perCMB(cpu time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / float64(n)
}

// BenchmarkDelivery ramps the rate (doubling from 500/s) until a step
// loses a CMB, then bisects between the last good and first bad rate to
// within 15 %, and runs the fixed rates 10/s and 1,000/s for their
// latencies. It prints every step and reports the maximum sustained rate,
// p50/p99 at 1,000/s, CPU per CMB on each side, and a bare Ed25519 sign
// and verify of a standard CMB measured in the same run.
func BenchmarkDelivery(b *testing.B) {
	if testing.Short() {
		b.Skip("two daemons for minutes")
	}
	b.Logf("daemons built from %s", builtFrom(b))
	sign, verify := bareSignVerify()
	b.Logf("bare ed25519 over a standard CMB: sign %.1f µs, verify %.1f µs", us(sign), us(verify))
	step := benchStep()
	run := func(rate int) deliveryStep {
		s := runDeliveryStep(b, rate, step)
		b.Log(s.String())
		return s
	}
	var steps []deliveryStep
	if v := os.Getenv("CMBNODE_BENCH_RATES"); v != "" {
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || r <= 0 {
				b.Fatalf("CMBNODE_BENCH_RATES: %q is not a rate", f)
			}
			steps = append(steps, run(r))
		}
	} else {
		good, bad := 0, 0
		for r := 500; bad == 0; r *= 2 {
			s := run(r)
			steps = append(steps, s)
			if s.ok() {
				good = r
			} else {
				bad = r
			}
			if r >= 64000 {
				break
			}
		}
		for bad > 0 && good > 0 && float64(bad-good)/float64(good) > 0.15 {
			mid := (good + bad) / 2
			s := run(mid)
			steps = append(steps, s)
			if s.ok() {
				good = mid
			} else {
				bad = mid
			}
		}
		b.ReportMetric(float64(good), "max-CMB/s")
		b.Logf("max sustained rate: %d CMB/s (first failing: %d)", good, bad)
		for _, r := range []int{10, 1000} {
			steps = append(steps, run(r))
		}
	}
	// Report the figures of the 1,000/s step if there is one, else the last.
	at := steps[len(steps)-1]
	for _, s := range steps {
		if s.rate == 1000 {
			at = s
		}
	}
	b.ReportMetric(ms(at.p50), "ms-p50")
	b.ReportMetric(ms(at.p99), "ms-p99")
	b.ReportMetric(perCMB(at.senderCPU, at.sent), "µs-CPU/sent")
	b.ReportMetric(perCMB(at.receiverCPU, at.accepted), "µs-CPU/accepted")
	b.ReportMetric(us(sign), "µs-bare-sign")
	b.ReportMetric(us(verify), "µs-bare-verify")
	b.Logf("at %d/s: sender %.0f µs/CMB = %.1f × (sign+verify %.0f µs); receiver %.0f µs/CMB = %.1f × verify (%.0f µs)",
		at.rate, perCMB(at.senderCPU, at.sent), perCMB(at.senderCPU, at.sent)/us(sign+verify), us(sign+verify),
		perCMB(at.receiverCPU, at.accepted), perCMB(at.receiverCPU, at.accepted)/us(verify), us(verify))
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// bareSignVerify times ed25519.Sign and Verify of a standard CMB's
// signature payload, the per-record crypto no implementation can avoid.
func bareSignVerify() (sign, verify time.Duration) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	var f cmb.Fields
	for i := range f {
		f[i].Text = strings.Repeat("x", fieldBytes)
	}
	texts := f.Texts()
	key := cmb.AddressV1(&texts, nil, "")
	payload := cmb.AppendSigPayload(nil, key, "01a22b06-79d8-7d64-9a71-0e01f73a03b5", time.Now().UnixMilli(), "bench", "")
	const n = 4000
	var sig []byte
	t0 := time.Now()
	for range n {
		sig = ed25519.Sign(priv, payload)
	}
	sign = time.Since(t0) / n
	t0 = time.Now()
	for range n {
		if !ed25519.Verify(pub, payload, sig) {
			panic("bare verify failed")
		}
	}
	verify = time.Since(t0) / n
	return sign, verify
}

// deliveryPair starts a sender and a receiver daemon in one public group
// and waits until a CMB remembered on the sender reaches the receiver.
func deliveryPair(b *testing.B, profile string, rate int) (snd, rcv *daemonProc) {
	dir := b.TempDir()
	grp := "bench"
	args := func(role string) []string {
		a := []string{"--public", "--group", grp}
		if os.Getenv("CMBNODE_BENCH_TRANSPORT") == "quic" {
			a = append(a, "--listen", "/ip4/127.0.0.1/udp/0/quic-v1")
		}
		if profile != "" {
			a = append(a, "--cpuprofile", filepath.Join(profile, fmt.Sprintf("%s-%d.pprof", role, rate)))
		}
		if tr := os.Getenv("CMBNODE_BENCH_TRACE"); tr != "" {
			a = append(a, "--trace", filepath.Join(tr, fmt.Sprintf("%s-%d.trace", role, rate)))
		}
		return a
	}
	snd = startDaemon(b, filepath.Join(dir, "snd"), args("sender")...)
	cs := dialDaemon(b, snd)
	rcvHome := filepath.Join(dir, "rcv")
	// The workload is one author: its gossip quota (author_rate 100/s,
	// burst 20,000 by default) would refuse every record past ~22,000 in
	// a 20 s step, whatever the daemons could carry. The bench measures
	// what they carry, so the receiver's quota is set out of reach.
	conf := "[admission]\nauthor_rate = 1000000.0\n"
	if os.Getenv("CMBNODE_BENCH_ANCHORS") == "none" {
		conf += "[svaf]\nrecent_anchors = -1\nnearest_anchors = -1\n"
	}
	if err := os.MkdirAll(rcvHome, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rcvHome, "config.toml"), []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	rcv = startDaemon(b, rcvHome, append(args("receiver"), "--bootstrap", status(b, cs).Addrs[0])...)
	cr := dialDaemon(b, rcv)
	waitFor(b, "the daemons meet", 30*time.Second, func() bool { return status(b, cs).Peers == 1 && status(b, cr).Peers == 1 })
	probe := rememberN(b, cs, 1, "delivery probe")
	waitFor(b, "a probe CMB crosses", 30*time.Second, func() bool { return hasAll(b, cr, probe) })
	cs.Close()
	cr.Close()
	return snd, rcv
}

// runDeliveryStep sends rate CMB/s for d on a fresh pair and measures.
func runDeliveryStep(b *testing.B, rate int, d time.Duration) deliveryStep {
	profile := os.Getenv("CMBNODE_BENCH_PROFILE")
	snd, rcv := deliveryPair(b, profile, rate)
	defer func() {
		// SIGTERM, so a profile is written out.
		snd.stop(b, syscall.SIGTERM)
		rcv.stop(b, syscall.SIGTERM)
	}()
	n := int(float64(rate) * d.Seconds())
	if n < 1 {
		n = 1
	}
	interval := time.Second / time.Duration(rate)
	stamp := time.Now().UnixNano()
	// The request lines are built before the clock starts, so the driver's
	// own cost is one write per CMB.
	r := rand.New(rand.NewSource(stamp))
	vocab := benchtext.Vocab(r, 4096)
	z := rand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = standardRemember(i, stamp, vocab, z)
	}

	arrived := make(map[string]time.Time, n)
	var amu sync.Mutex
	lis := dialRaw(b, rcv.sock)
	listenDone := make(chan string, 1)
	subscribed := make(chan struct{})
	go func() {
		// The listener reads steadily, as an agent would.
		br := bufio.NewReaderSize(lis, 1<<20)
		var ev struct {
			Type  string `json:"type"`
			Event string `json:"event"`
			Data  struct {
				Key string `json:"key"`
			} `json:"data"`
		}
		first := true
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				listenDone <- "listener: " + err.Error()
				return
			}
			now := time.Now()
			if first {
				first = false
				close(subscribed)
				continue
			}
			ev.Data.Key = ""
			if json.Unmarshal(line, &ev) != nil || ev.Event != "cmb-accepted" {
				continue
			}
			amu.Lock()
			arrived[ev.Data.Key] = now
			amu.Unlock()
		}
	}()
	if _, err := lis.Write([]byte(`{"type":"listen"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	<-subscribed

	conns := make([]net.Conn, deliveryConns)
	keys := make([]string, n)
	replied := make([]time.Time, n)
	failed := 0
	var rmu sync.Mutex
	var readers sync.WaitGroup
	for ci := range conns {
		conns[ci] = dialRaw(b, snd.sock)
		readers.Go(func() {
			br := bufio.NewReaderSize(conns[ci], 64<<10)
			var rep struct {
				Type string `json:"type"`
				ID   int    `json:"id"`
				Key  string `json:"key"`
			}
			for got := 0; got < (n-ci+deliveryConns-1)/deliveryConns; got++ {
				line, err := br.ReadSlice('\n')
				if err != nil {
					rmu.Lock()
					failed += (n-ci+deliveryConns-1)/deliveryConns - got
					rmu.Unlock()
					return
				}
				rep.Key = ""
				if json.Unmarshal(line, &rep) != nil || rep.Type != "result" {
					rmu.Lock()
					failed++
					rmu.Unlock()
					continue
				}
				keys[rep.ID], replied[rep.ID] = rep.Key, time.Now()
			}
		})
	}

	cpuS0, cpuR0 := procCPU(b, snd.pid()), procCPU(b, rcv.pid())
	swS0, swR0 := procSwitches(snd.pid()), procSwitches(rcv.pid())
	waitS0, waitR0 := procRunWait(snd.pid()), procRunWait(rcv.pid())
	start := time.Now().Add(10 * time.Millisecond)
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		if _, err := conns[i%deliveryConns].Write(lines[i]); err != nil {
			b.Fatalf("write request %d: %v", i, err)
		}
	}
	readers.Wait()
	// Stragglers have until the loss deadline of the last CMB.
	last := start.Add(time.Duration(n-1) * interval).Add(deliveryLossAfter)
	for time.Now().Before(last) {
		amu.Lock()
		all := len(arrived) >= n-failed
		amu.Unlock()
		if all {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cpuS1, cpuR1 := procCPU(b, snd.pid()), procCPU(b, rcv.pid())
	swS1, swR1 := procSwitches(snd.pid()), procSwitches(rcv.pid())
	waitS1, waitR1 := procRunWait(snd.pid()), procRunWait(rcv.pid())
	stored := status(b, dialDaemon(b, rcv)).CMBs
	for _, c := range conns {
		c.Close()
	}
	lis.Close()

	s := deliveryStep{rate: rate, failed: failed, senderCPU: cpuS1 - cpuS0, receiverCPU: cpuR1 - cpuR0,
		senderSw: swS1 - swS0, receiverSw: swR1 - swR0, senderWait: waitS1 - waitS0, receiverWait: waitR1 - waitR0, stored: stored}
	select {
	case e := <-listenDone:
		if !strings.Contains(e, "use of closed") {
			s.listenerErr = e
		}
	default:
	}
	amu.Lock()
	defer amu.Unlock()
	s.accepted = len(arrived)
	var lat, reply []time.Duration
	var times strings.Builder
	fmt.Fprintf(&times, "# start %d\n", start.UnixNano())
	for i, k := range keys {
		sched := start.Add(time.Duration(i) * interval)
		if k == "" {
			continue
		}
		at, ok := arrived[k]
		arrival := -1.0
		if ok {
			arrival = ms(at.Sub(sched))
		}
		fmt.Fprintf(&times, "%d %.3f %.3f %.3f\n", i, ms(sched.Sub(start)), ms(replied[i].Sub(sched)), arrival)
		s.sent++
		reply = append(reply, replied[i].Sub(sched))
		l := at.Sub(sched)
		if !ok || l > deliveryLossAfter {
			s.lost++
			continue
		}
		s.arrived++
		lat = append(lat, l)
	}
	if dir := os.Getenv("CMBNODE_BENCH_TIMES"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("times-%d.txt", rate)), []byte(times.String()), 0o644); err != nil {
			b.Errorf("CMBNODE_BENCH_TIMES: %v", err)
		}
	}
	s.p50, s.p99, s.max = permille(lat, 500), permille(lat, 990), permille(lat, 1000)
	s.replyP99 = permille(reply, 990)
	return s
}

// permille is the q/1000-quantile of d (1000: the largest), 0 when d is
// empty; it sorts d.
func permille(d []time.Duration, q int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*q/1000)]
}

// standardRemember is one remember request of a standard CMB: the seven
// fields, 300 bytes each, unique to i and the step. The text is words of a
// 4,096-word vocabulary drawn by Zipf's law, as prose is, so admission's
// text search and anchors see records that differ as real ones do.
func standardRemember(i int, stamp int64, vocab []string, z *rand.Zipf) []byte {
	names := [...]string{"focus", "issue", "intent", "motivation", "commitment", "perspective", "mood"}
	fields := map[string]string{}
	for _, name := range names {
		fields[name] = benchtext.Field(fmt.Sprintf("%s %d of %d:", name, i, stamp), fieldBytes, vocab, z)
	}
	line, _ := json.Marshal(map[string]any{"type": "remember", "id": i, "fields": fields})
	return append(line, '\n')
}

func dialRaw(b *testing.B, sock string) net.Conn {
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// procSwitches is the context switches, voluntary and not, of pid's
// threads (a Go daemon's threads live as long as it does).
func procSwitches(pid int) int64 {
	return threadStatusSum(pid, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
}

// procRunWait is the time pid's threads have spent runnable, waiting on a
// run queue for a CPU: the second field of each thread's schedstat.
func procRunWait(pid int) time.Duration {
	var ns int64
	eachThread(pid, "schedstat", func(raw string) {
		if f := strings.Fields(raw); len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			ns += v
		}
	})
	return time.Duration(ns)
}

// threadStatusSum is the sum over pid's threads of the /proc status
// counters named by prefixes (a thread that ends meanwhile counts 0).
func threadStatusSum(pid int, prefixes ...string) int64 {
	var n int64
	eachThread(pid, "status", func(raw string) {
		for _, line := range strings.Split(raw, "\n") {
			for _, p := range prefixes {
				if v, ok := strings.CutPrefix(line, p); ok {
					k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += k
				}
			}
		}
	})
	return n
}

// eachThread calls fn with the /proc file name of each of pid's threads
// (a thread that ends meanwhile is skipped).
func eachThread(pid int, name string, fn func(raw string)) {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/" + name)
	for _, f := range files {
		if raw, err := os.ReadFile(f); err == nil {
			fn(string(raw))
		}
	}
}

// procCPU is pid's user plus system time.
func procCPU(b *testing.B, pid int) time.Duration {
	return time.Duration(cpuTicks(b, pid)) * 10 * time.Millisecond // USER_HZ is 100
}
