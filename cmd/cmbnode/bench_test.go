package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDaemonStartToReady is process start to the "ready" log line on
// an existing home (identity and store in place, as on every start but
// the first).
func BenchmarkDaemonStartToReady(b *testing.B) {
	home := b.TempDir()
	if r := bin(b, "", "init", "--home", home); r.code != 0 {
		b.Fatalf("init: %+v", r)
	}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		d := startDaemon(b, home)
		total += d.ready
		b.StopTimer()
		if err := d.stop(b, syscall.SIGTERM); err != nil {
			b.Fatalf("stop: %v", err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-to-ready")
}

// BenchmarkDaemonIdleRSS is the resident memory of a daemon that has
// started and sat idle for a second.
func BenchmarkDaemonIdleRSS(b *testing.B) {
	home := b.TempDir()
	var kib int64
	for range b.N {
		d := startDaemon(b, home)
		time.Sleep(time.Second)
		kib = vmRSS(b, d.pid())
		if err := d.stop(b, syscall.SIGTERM); err != nil {
			b.Fatalf("stop: %v", err)
		}
	}
	b.ReportMetric(float64(kib)/1024, "MiB-idle-rss")
}

func vmRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Skipf("no /proc on this system: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n
				}
			}
		}
	}
	tb.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
