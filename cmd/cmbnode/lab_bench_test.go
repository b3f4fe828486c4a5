package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// The NAT lab's numbers (make bench, as root): each sub-benchmark builds
// its own lab, measures once (its body takes longer than -benchtime, so
// b.N stays 1) and reports with ReportMetric.

// deliveryMs remembers one CMB on from and returns how long until to
// holds it, polling every millisecond.
func deliveryMs(b *testing.B, from, to *ipc.Client) float64 {
	b.Helper()
	r, err := from.Remember(context.Background(), ipc.RememberArgs{Fields: map[string]any{"focus": "first delivery " + strconv.FormatInt(time.Now().UnixNano(), 10)}})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for !has(b, to, r.Key) {
		if time.Since(start) > time.Minute {
			b.Fatal("no delivery within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	return float64(time.Since(start).Microseconds()) / 1000
}

// BenchmarkLabDelivery: time from remember on A to the CMB stored on B,
// for the first CMB after A and B met through the relay (symmetric NATs:
// it stays relayed) and after hole punching made them direct.
func BenchmarkLabDelivery(b *testing.B) {
	b.Run("relayed", func(b *testing.B) {
		r := startLab(b, true)
		waitFor(b, "A and B meet", 90*time.Second, func() bool { return peerConn(b, r.ca, r.bID) == "relayed" })
		b.ReportMetric(deliveryMs(b, r.ca, r.cb), "ms-first-delivery")
		b.ReportMetric(deliveryMs(b, r.ca, r.cb), "ms-next-delivery")
	})
	b.Run("direct", func(b *testing.B) {
		r := startLab(b, false)
		waitFor(b, "A and B go direct", 90*time.Second, func() bool { return peerConn(b, r.ca, r.bID) == "direct" })
		b.ReportMetric(deliveryMs(b, r.ca, r.cb), "ms-first-delivery")
		b.ReportMetric(deliveryMs(b, r.ca, r.cb), "ms-next-delivery")
	})
}

// BenchmarkLabHolePunch: 20 hole punches per transport behind
// port-preserving NATs. A stays up; B starts, meets A through the relay,
// and the attempt counts as a success when A and B end up direct and
// the punch (not a plain dial) made it, as a failure when a punch failed
// or nothing happened within 20 s; then B stops. Each attempt gives B a
// new port, so no NAT mapping or TIME_WAIT of an earlier one is reused.
func BenchmarkLabHolePunch(b *testing.B) {
	attempts := 20
	if v, err := strconv.Atoi(os.Getenv("CMBNODE_LAB_PUNCHES")); err == nil && v > 0 {
		attempts = v
	}
	for _, transport := range []string{"tcp", "quic"} {
		b.Run(transport, func(b *testing.B) {
			needLab(b)
			l := newLab(b, false)
			relayHome, aHome, bHome, _ := labGroup(b, b.TempDir())
			relay := l.daemon("relay", relayHome, append(listenOn("11.0.0.1", 4747, ""), "--relay-service", "--reachability", "public")...)
			cr := dialDaemon(b, relay)
			rAddr := relayAddr(b, cr, transport)
			a := l.daemon("a", aHome, append(listenOn("0.0.0.0", 4747, transport), "--reachability", "private", "--relay", rAddr)...)
			ca := dialDaemon(b, a)
			aID := status(b, ca).PeerID
			ok, took := 0, time.Duration(0)
			for i := range attempts {
				d := l.daemon("b", bHome, append(listenOn("0.0.0.0", 5000+i, transport), "--reachability", "private", "--relay", rAddr)...)
				cb := dialDaemon(b, d)
				bID := status(b, cb).PeerID
				start := time.Now()
				success := false
				aFailed, aOK := reach(b, ca).HolePunchFailures, reach(b, ca).HolePunchSuccesses
				for time.Since(start) < 20*time.Second {
					if peerConn(b, cb, aID) == "direct" {
						// Either side's tracer counts the punch: the side
						// whose dial lost may record it a moment later.
						success = reach(b, cb).HolePunchSuccesses > 0 || reach(b, ca).HolePunchSuccesses > aOK
						break
					}
					if reach(b, cb).HolePunchFailures > 0 || reach(b, ca).HolePunchFailures > aFailed {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				for _, line := range strings.Split(d.logs.String(), "\n") {
					if !success && strings.Contains(line, "hole punch") {
						b.Logf("attempt %d: B: %.300s", i, line)
					}
				}
				if success {
					ok++
					took += time.Since(start)
				}
				cb.Close()
				if err := d.stop(b, syscall.SIGTERM); err != nil {
					b.Fatalf("B did not stop: %v", err)
				}
				waitFor(b, "A sees B leave", 30*time.Second, func() bool { return peerConn(b, ca, bID) == "" })
			}
			if f := os.Getenv("CMBNODE_LAB_ALOG"); f != "" {
				_ = os.WriteFile(f, []byte(a.logs.String()), 0o600) // A's log, to debug the lab
			}
			b.ReportMetric(float64(ok), "successes/20")
			if ok > 0 {
				b.ReportMetric(float64(took.Milliseconds())/float64(ok), "ms-to-direct")
			}
		})
	}
}

// BenchmarkLabRelayCPU: the relay's CPU time (user + system, from
// /proc/PID/stat, 10 ms ticks) while 1,000 CMBs go from A to B through it
// behind symmetric NATs, per CMB. It includes the relay's own share as a
// member (each CMB is gossiped to it too, and it stores it).
func BenchmarkLabRelayCPU(b *testing.B) {
	const n = 1000
	r := startLab(b, true)
	waitFor(b, "A and B meet", 90*time.Second, func() bool { return peerConn(b, r.ca, r.bID) == "relayed" })
	before := cpuTicks(b, r.relay.pid())
	keys := rememberN(b, r.ca, n, "relay cpu")
	waitFor(b, "B holds them all", 5*time.Minute, func() bool { return has(b, r.cb, keys[len(keys)-1]) && hasAll(b, r.cb, keys) })
	spent := cpuTicks(b, r.relay.pid()) - before
	if got := peerConn(b, r.ca, r.bID); got != "relayed" {
		b.Fatalf("A and B went %s during the run", got)
	}
	b.ReportMetric(float64(spent)*10_000/n, "relay-µs-cpu/cmb")
}

// cpuTicks is a process's user + system time in clock ticks (1/100 s).
func cpuTicks(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}
