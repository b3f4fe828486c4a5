package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// --cpuprofile and --trace write their files over the whole run, finished
// at a clean stop: a gzipped pprof profile, a Go execution trace.
func TestDaemonProfileAndTraceFiles(t *testing.T) {
	dir := t.TempDir()
	prof, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace")
	d := startDaemon(t, t.TempDir(), "--cpuprofile", prof, "--trace", tr)
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("stop: %v\n%s", err, d.logs)
	}
	for _, f := range []struct {
		path  string
		magic []byte
	}{{prof, []byte{0x1f, 0x8b}}, {tr, []byte("go 1.")}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, f.magic) || len(b) < 64 {
			t.Errorf("%s: %d bytes starting %q, want %q…", f.path, len(b), b[:min(len(b), 8)], f.magic)
		}
	}
}
