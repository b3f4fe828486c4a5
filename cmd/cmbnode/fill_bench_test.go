package main

import (
	"bufio"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/internal/benchtext"
)

// BenchmarkFill10k stores 10,000 standard CMBs (7 fields × 300 bytes)
// through a daemon's socket and reports what the daemon then costs: its
// resident memory after the fill, the disk its home takes per CMB
// (blocks allocated, not file sizes), the time from start to ready on
// that store, and its CPU while idle after the restart.
// CMBNODE_BENCH_HOME=DIR fills DIR (new) instead of a temporary home and
// leaves it there.
func BenchmarkFill10k(b *testing.B) {
	const n = 10000
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
	c0 := procCPU(b, d.pid())
	const idle = 130 * time.Second
	time.Sleep(idle)
	idleCPU := procCPU(b, d.pid()) - c0

	b.ReportMetric(float64(n)/fill.Seconds(), "fill-CMB/s")
	b.ReportMetric(float64(rss)/1024, "MiB-RSS-after-fill")
	b.ReportMetric(float64(disk)/n, "B-disk/CMB")
	b.ReportMetric(float64(ready.Milliseconds())/starts, "ms-start-to-ready")
	b.ReportMetric(100*idleCPU.Seconds()/idle.Seconds(), "%-core-idle")
}

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
