package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/store"
)

// mountTmpfs mounts a tmpfs of size bytes and unmounts it when the test
// ends, passed or failed; without root the test is skipped, saying so.
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
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fillFile appends to path until the file system is full, or limit bytes.
func fillFile(t *testing.T, path string, limit int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := int64(0); limit <= 0 || n < limit; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestDaemonOnAFullDisk: a daemon whose disk fills answers remember with
// disk_full naming the path and the free space, keeps answering reads,
// shows the state in status and writes again once space is freed, without
// a restart. Started on a disk full to the last byte it runs, read-only,
// with one clear log line, and once space is freed its store reopens
// itself writable: status says writable and remember works, still
// without a restart; nothing acknowledged is lost. (Before the reopen,
// the read-only start stayed read-only until a restart.) Before: remember
// failed with internal ("growing log segment: no space left on device"),
// every write after it too until a restart, and the fill killed the
// process (SIGBUS in badger).
func TestDaemonOnAFullDisk(t *testing.T) {
	home := filepath.Join(mountTmpfs(t, 48<<20), "home")
	so := store.Options{MemTableBytes: 1 << 20, BlockCacheBytes: 1 << 20, ValueLogFileBytes: 1 << 20}
	ctx := context.Background()
	d := start(t, home, Options{Name: "full", StoreOptions: so})
	c := client(t, d.socket)
	filler := filepath.Join(filepath.Dir(home), "filler")
	fillFile(t, filler, 8<<20)

	var keys []string
	pad := strings.Repeat("fills the disk ", 100)
	var werr error
	for i := 0; werr == nil; i++ {
		var res struct{ Key string }
		res2, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": fmt.Sprintf("record %d %s", i, pad)}})
		res.Key, werr = res2.Key, err
		if err == nil {
			keys = append(keys, res.Key)
		}
	}
	var ie *ipc.Error
	if !errors.As(werr, &ie) || ie.Code != ipc.CodeDiskFull || !strings.Contains(ie.Message, filepath.Join(home, "store")) || !strings.Contains(ie.Message, "free") {
		t.Fatalf("remember on a full disk: %v, want disk_full naming the store and its free space", werr)
	}
	t.Logf("%d remembered, then: %v", len(keys), werr)
	st, err := c.Status(ctx)
	if err != nil || !st.Storage.DiskFull || st.Storage.Writable {
		t.Fatalf("status on a full disk: %+v %v", st.Storage, err)
	}
	if _, err := c.Get(ctx, keys[0]); err != nil {
		t.Fatalf("get on a full disk: %v", err)
	}
	os.Remove(filler)
	if st, err := c.Status(ctx); err != nil || !st.Storage.Writable {
		t.Fatalf("status once space is freed: %+v %v", st.Storage, err)
	}
	res, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "after space came back"}})
	if err != nil {
		t.Fatalf("remember once space is freed: %v", err)
	}
	keys = append(keys, res.Key)
	if err := d.shutdown(t); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// Started on a disk full to the last byte.
	fillFile(t, filler, 0)
	d = start(t, home, Options{StoreOptions: so})
	c = client(t, d.socket)
	if n := strings.Count(d.logs.String(), "the disk is full"); n != 1 {
		t.Errorf("start on a full disk logged %d disk-full lines, want 1:\n%s", n, d.logs)
	}
	st, err = c.Status(ctx)
	if err != nil || !st.Storage.DiskFull || !st.Storage.ReadOnly || st.CMBs != len(keys) {
		t.Fatalf("status after a start on a full disk: %+v, %d cmbs (%d remembered), %v", st.Storage, st.CMBs, len(keys), err)
	}
	if _, err := c.Get(ctx, keys[len(keys)-1]); err != nil {
		t.Fatalf("get after a start on a full disk: %v", err)
	}
	if _, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "refused"}}); !errors.As(err, &ie) || ie.Code != ipc.CodeDiskFull {
		t.Fatalf("remember on a read-only start: %v, want disk_full", err)
	}

	// Space freed under the running daemon: with no write asking, its
	// store reopens itself writable (it looks every few seconds), and
	// remember works, all without a restart.
	os.Remove(filler)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err = c.Status(ctx)
		if err != nil {
			t.Fatalf("status once space is freed after a read-only start: %v", err)
		}
		if st.Storage.Writable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status 30 s after space was freed under a read-only start: %+v, want writable", st.Storage)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Storage.DiskFull || st.Storage.ReadOnly {
		t.Fatalf("status once writable again: %+v", st.Storage)
	}
	res, err = c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "after a read-only start, no restart"}})
	if err != nil {
		t.Fatalf("remember once space is freed after a read-only start: %v", err)
	}
	keys = append(keys, res.Key)
	if _, err := c.Get(ctx, res.Key); err != nil {
		t.Fatalf("get of the record remembered after the swap: %v", err)
	}
	if err := d.shutdown(t); err != nil {
		t.Fatalf("stop: %v", err)
	}

	d = start(t, home, Options{StoreOptions: so})
	c = client(t, d.socket)
	lost := 0
	for _, k := range keys {
		if _, err := c.Get(ctx, k); err != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged records lost", lost, len(keys))
	}
	if _, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "writable again"}}); err != nil {
		t.Fatalf("remember after a restart with space: %v", err)
	}
}
