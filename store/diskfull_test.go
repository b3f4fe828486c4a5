package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory and
// unmounts it when the test ends, passed or failed. It needs root; without
// it the test is skipped, saying so.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a small tmpfs to fill needs root (run the tests as root to include it)")
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs (%v)", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full (or limit bytes).
func fill(t *testing.T, path string, limit int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := int64(0); limit <= 0 || n < limit; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			if !noSpace(err) {
				t.Fatal(err)
			}
			return
		}
	}
}

func diskEntry(i int) Entry {
	var e Entry
	e.Key = fmt.Sprintf("cmb1-%064x", i)
	e.CreatedBy, e.CreatedAt, e.Group = "node-a", time.Now().UnixMilli(), "g"
	e.Texts[0] = fmt.Sprintf("disk full record %d", i)
	e.Raw = []byte(fmt.Sprintf(`{"key":"%s","pad":"%s"}`, e.Key, strings.Repeat("p", 2000)))
	return e
}

// TestDiskFull: on a small tmpfs, writers fill the disk. Writes are then
// refused with a *DiskFullError naming the path and the free space (not
// "refuses writes after an earlier failure"), reads go on, and once space
// is freed writes resume without a restart. With the disk 100% full the
// store closes and opens again, read-only, with everything acknowledged;
// with space back that same store writes again at the next put, reads
// going on during the swap, and nothing acknowledged before or after is
// lost. Before: the first ENOSPC broke the store until restart, and a
// flush of badger's memtable on the full disk killed the process with
// SIGBUS; then, a store opened read-only refused every write until it was
// closed and opened again.
func TestDiskFull(t *testing.T) {
	dir := mountTmpfs(t, 40<<20)
	ctx := context.Background()
	opts := Options{MemTableBytes: 1 << 20, BlockCacheBytes: 1 << 20, ValueLogFileBytes: 1 << 20}
	filler := filepath.Join(dir, "filler")
	fill(t, filler, 8<<20) // what the operator frees later
	sdir := filepath.Join(dir, "store")
	s, err := Open(sdir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()

	var mu sync.Mutex
	var acked []string
	var firstErr error
	var wg sync.WaitGroup
	var next int
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				e := diskEntry(i)
				_, _, err := s.Put(ctx, e, Meta{})
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				acked = append(acked, e.Key)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d records acknowledged before the disk filled; then: %v", len(acked), firstErr)
	var df *DiskFullError
	if !errors.As(firstErr, &df) || !errors.Is(firstErr, ErrDiskFull) || df.Path != sdir || df.Need == 0 || df.Free >= df.Need {
		t.Fatalf("a write on the full disk: %v, want a *DiskFullError with the path and free space", firstErr)
	}
	if !strings.Contains(firstErr.Error(), sdir) || strings.Contains(firstErr.Error(), "earlier failure") {
		t.Fatalf("disk-full error text: %q", firstErr)
	}
	if st := s.DiskState(); st == nil {
		t.Fatal("DiskState reports no disk-full condition while writes are refused")
	}
	// Reads go on.
	if _, err := s.Get(ctx, acked[0]); err != nil {
		t.Fatalf("read while the disk is full: %v", err)
	}
	if n := s.Count(); n != len(acked) {
		t.Fatalf("count %d while the disk is full, %d acknowledged", n, len(acked))
	}
	// Room the log had already allocated may still take a small write;
	// past it, writes are refused again, every one the same way.
	for i := 0; ; i++ {
		e := diskEntry(1_000_000 + i)
		_, _, err := s.Put(ctx, e, Meta{})
		if err == nil {
			acked = append(acked, e.Key)
			if i < 10000 {
				continue
			}
		}
		if !errors.Is(err, ErrDiskFull) {
			t.Fatalf("a write while full: %v, want disk full", err)
		}
		break
	}

	// Writers retry the same records while the disk is full and as space
	// comes back: a record is acknowledged (stored or "duplicate") only if
	// it is on disk, even when a retry shares a batch with a refused one.
	retry := make(chan struct{})
	var rwg sync.WaitGroup
	for w := range 4 {
		rwg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-retry:
					return
				default:
				}
				e := diskEntry(5_000_000 + w*1000 + j%8)
				if _, _, err := s.Put(ctx, e, Meta{}); err == nil {
					mu.Lock()
					acked = append(acked, e.Key)
					mu.Unlock()
				} else if !errors.Is(err, ErrDiskFull) {
					t.Errorf("a retried write: %v", err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)

	// Space comes back: writes resume by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	close(retry)
	rwg.Wait()
	if st := s.DiskState(); st != nil {
		t.Fatalf("DiskState after space was freed: %v", st)
	}
	for i := range 20 {
		e := diskEntry(2_000_000 + i)
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatalf("write after space was freed: %v", err)
		}
		acked = append(acked, e.Key)
	}

	// The disk fills to the last byte; the store closes cleanly and opens
	// read-only.
	fill(t, filler, 0)
	if err := s.Close(); err != nil {
		t.Logf("close on a full disk: %v", err)
	}
	fill(t, filler, 0) // what the close gave back
	s, err = Open(sdir, opts)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	st := s.DiskState()
	if st == nil || !st.ReadOnly {
		t.Fatalf("a store opened on a full disk reports %v, want read-only", st)
	}
	if n, want := s.Count(), len(distinct(acked)); n != want {
		t.Fatalf("opened read-only with %d records, %d acknowledged", n, want)
	}
	if _, err := s.Get(ctx, acked[len(acked)-1]); err != nil {
		t.Fatalf("read from the read-only store: %v", err)
	}
	var rof *DiskFullError
	if _, _, err := s.Put(ctx, diskEntry(3_000_000), Meta{}); !errors.As(err, &rof) || !rof.ReadOnly {
		t.Fatalf("a write to the read-only store: %v, want a read-only *DiskFullError", err)
	}

	// With space back the same store, not reopened, becomes writable at
	// the next write, while readers go on reading throughout.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var readErr error
	var reads int
	held := slices.Clone(acked) // the readers' keys; acked grows meanwhile
	var rd sync.WaitGroup
	for r := range 2 {
		rd.Go(func() {
			for i := r; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := held[i%len(held)]
				if _, err := s.Get(ctx, k); err != nil {
					mu.Lock()
					readErr = fmt.Errorf("get %s during the swap: %w", k, err)
					mu.Unlock()
					return
				}
				if _, err := s.Has(ctx, k); err != nil {
					mu.Lock()
					readErr = fmt.Errorf("has %s during the swap: %w", k, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				reads++
				mu.Unlock()
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	for i := range 50 {
		e := diskEntry(3_000_000 + i)
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			close(stop)
			rd.Wait()
			t.Fatalf("write %d to a store opened read-only, once space was freed: %v", i, err)
		}
		acked = append(acked, e.Key)
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	rd.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	t.Logf("%d reads during the swap", reads)
	if st := s.DiskState(); st != nil {
		t.Fatalf("DiskState once the read-only store writes again: %v", st)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("check after the swap: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close after the swap: %v", err)
	}

	// Opened again, it holds everything acknowledged, before and after.
	s, err = Open(sdir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.DiskState(); st != nil {
		t.Fatalf("reopened with space: %v", st)
	}
	lost := 0
	for _, k := range acked {
		if ok, err := s.Has(ctx, k); err != nil || !ok {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged records lost", lost, len(acked))
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	if _, _, err := s.Put(ctx, diskEntry(4_000_000), Meta{}); err != nil {
		t.Fatalf("write after reopening with space: %v", err)
	}
}

func distinct(keys []string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}
