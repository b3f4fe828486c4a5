package main

import (
	"bufio"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/internal/benchtext"
)

// BenchmarkFill10k stores 10,000 standard CMBs (7 fields × 300 bytes)
// through a daemon's socket and reports what the daemon then costs: its
// resident memory after the fill, the disk its home takes per CMB
// (blocks allocated, not file sizes), the time from start to ready on
// that store, and its CPU while idle after the restart: utime+stime
// (%-core-idle), the time its threads really ran (%-core-idle-run) and
// their wake-ups a second.
// CMBNODE_BENCH_HOME=DIR fills DIR (new) instead of a temporary home and
// leaves it there.
func BenchmarkFill10k(b *testing.B) {
	const n = 10000
	b.Logf("daemon built from %s", builtFrom(b))
	home := b.TempDir()
	if dir := os.Getenv("CMBNODE_BENCH_HOME"); dir != "" {
		home = dir // kept after the run, to profile a start on it
	}
	d := startDaemon(b, home)
	conn := dialRaw(b, d.sock)
	r := rand.New(rand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := rand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	stamp := time.Now().UnixNano()
	// Requests with ids, 64 ahead of their replies, as a busy agent sends.
	inFlight := make(chan struct{}, 64)
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(conn, 64<<10)
		for range n {
			if _, err := br.ReadSlice('\n'); err != nil {
				done <- err
				return
			}
			<-inFlight
		}
		done <- nil
	}()
	t0 := time.Now()
	for i := range n {
		inFlight <- struct{}{}
		if _, err := conn.Write(standardRemember(i, stamp, vocab, z)); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	fill := time.Since(t0)
	if got := status(b, dialDaemon(b, d)).CMBs; got != n {
		b.Fatalf("%d CMBs stored, want %d", got, n)
	}
	// Let background work settle: indexing, badger flushes, and gossip
	// history (GossipSub keeps what it published for 5 heartbeats).
	time.Sleep(10 * time.Second)
	rss := vmRSS(b, d.pid())
	if err := d.stop(b, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	disk := allocatedBytes(b, home)

	var ready time.Duration
	const starts = 3
	for range starts {
		d = startDaemon(b, home)
		ready += d.ready
		if err := d.stop(b, syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
	}
	d = startDaemon(b, home)
	// Idle from the first seconds after ready on, which still finish the
	// start (the text index, badger's first compactions), for long enough
	// to hold the Go runtime's forced collection (two minutes after the
	// last): on an idle daemon that is half of its CPU, and a shorter
	// window would leave it out.
	time.Sleep(5 * time.Second)
	c0, r0, w0 := procCPU(b, d.pid()), procRuntime(d.pid()), procWakeups(d.pid())
	const idle = 130 * time.Second
	time.Sleep(idle)
	idleCPU := procCPU(b, d.pid()) - c0
	idleRun := procRuntime(d.pid()) - r0
	wakeups := procWakeups(d.pid()) - w0

	b.ReportMetric(float64(n)/fill.Seconds(), "fill-CMB/s")
	b.ReportMetric(float64(rss)/1024, "MiB-RSS-after-fill")
	b.ReportMetric(float64(disk)/n, "B-disk/CMB")
	b.ReportMetric(float64(ready.Milliseconds())/starts, "ms-start-to-ready")
	b.ReportMetric(100*idleCPU.Seconds()/idle.Seconds(), "%-core-idle")
	b.ReportMetric(100*idleRun.Seconds()/idle.Seconds(), "%-core-idle-run")
	b.ReportMetric(float64(wakeups)/idle.Seconds(), "wakeups/s-idle")
}

// procRuntime is the time pid's threads have run on a CPU, summed from
// each thread's schedstat (its first field, in ns, kept by the scheduler).
// Unlike utime+stime it is not sampled at the timer tick: on a tickless
// kernel an idle process's ticks are charged by whoever the tick restarted
// at idle exit finds running, which makes utime+stime about the number of
// wake-ups times a tick's share, whatever each wake-up really ran.
func procRuntime(pid int) time.Duration {
	var ns int64
	eachThread(pid, "schedstat", func(raw string) {
		if fs := strings.Fields(raw); len(fs) > 0 {
			v, _ := strconv.ParseInt(fs[0], 10, 64)
			ns += v
		}
	})
	return time.Duration(ns)
}

// procWakeups is the voluntary context switches of pid's threads: each
// is a thread going to sleep, so over a window it counts the wake-ups
// that followed (a Go daemon's threads live as long as it does).
func procWakeups(pid int) int64 { return threadStatusSum(pid, "voluntary_ctxt_switches:") }

// allocatedBytes is the disk space the files under dir take (st_blocks).
func allocatedBytes(b *testing.B, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		total += st.Blocks * 512
		b.Logf("%10d allocated %10d size  %s", st.Blocks*512, st.Size, p[len(dir):])
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}
