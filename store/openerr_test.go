package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// closedStore returns the directory of a closed store holding one record,
// its log in two segments (the record in the first).
func closedStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.opts.hooks.walLimit = 1 // the first frame fills the segment: a checkpoint starts segment 2
	mustPut(t, s, mkEntry("x", testBase, "in segment 1"))
	settle(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(2))); err != nil {
		t.Fatalf("no second segment: %v", err)
	}
	return dir
}

// TestOpenErrorNotCorruption: an Open that fails for a reason other than
// damaged data says what failed, keeps the cause for errors.Is, and does
// not claim corruption (for which the advice is to move the store aside).
func TestOpenErrorNotCorruption(t *testing.T) {
	notCorruption := func(t *testing.T, err error, cause error, says ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("Open succeeded")
		}
		msg := err.Error()
		if errors.Is(err, ErrCorrupted) || strings.Contains(msg, ErrCorrupted.Error()) {
			t.Fatalf("reported as corruption: %v", err)
		}
		if cause != nil && !errors.Is(err, cause) {
			t.Fatalf("cause %v lost: %v", cause, err)
		}
		for _, s := range says {
			if !strings.Contains(msg, s) {
				t.Fatalf("%q not said: %v", s, err)
			}
		}
	}
	t.Run("a file where the store directory should be", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(f, Options{})
		notCorruption(t, err, syscall.ENOTDIR, f, "creating store directory")
	})
	t.Run("a directory where a log segment should be", func(t *testing.T) {
		dir := closedStore(t)
		seg := filepath.Join(dir, segName(1))
		if err := os.Remove(seg); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(seg, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{})
		notCorruption(t, err, syscall.EISDIR, dir, "log segment 1")
	})
	t.Run("too many open files", func(t *testing.T) {
		dir := closedStore(t)
		var old syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
		// No room for one file more than are open now (the count includes
		// the descriptor that read /proc/self/fd), so the first open of
		// Open fails. With a little room the failure would move into
		// badger's open, some of whose reads of the directory end the
		// process (y.Check) instead of returning an error.
		low := old
		low.Cur = uint64(openFDs(t) - 1)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
			t.Skipf("cannot lower the open file limit: %v", err)
		}
		s, err := Open(dir, Options{})
		if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); rerr != nil {
			t.Fatal(rerr)
		}
		if err == nil {
			s.Close()
		}
		// Badger flattens the errors it wraps into text, so the cause
		// shows only in the message.
		notCorruption(t, err, nil, dir, "too many open files")
	})
}

// TestOpenCorruptionFound: damage that Open finds in badger's files or in
// the log is reported as corruption (ErrCorrupted), saying what was found
// and where.
func TestOpenCorruptionFound(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		says   string
	}{
		{"garbage MANIFEST", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "MANIFEST"), bytes.Repeat([]byte{0xde, 0xad}, 64))
		}, "manifest has bad magic"},
		{"MANIFEST byte flipped", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "MANIFEST")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-2] ^= 0xff
			writeFile(t, p, b)
		}, "checksum mismatch"},
		{"table missing", func(t *testing.T, dir string) {
			tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
			if err != nil || len(tables) == 0 {
				t.Fatalf("no table to remove: %v", err)
			}
			for _, p := range tables {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
		}, "file does not exist for table"},
		{"garbage KEYREGISTRY", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "KEYREGISTRY"), bytes.Repeat([]byte{0xde, 0xad}, 64))
		}, "Encryption key mismatch"},
		{"garbage value log", func(t *testing.T, dir string) {
			vlogs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
			if err != nil || len(vlogs) == 0 {
				t.Fatalf("no value log to damage: %v", err)
			}
			for _, p := range vlogs {
				writeFile(t, p, bytes.Repeat([]byte{0xde, 0xad}, 4096))
			}
		}, "Invalid datakey id"},
		{"segment header damaged", func(t *testing.T, dir string) {
			p := filepath.Join(dir, segName(1))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[3] ^= 0xff
			writeFile(t, p, b)
		}, "log segment 1 has no valid header"},
		{"segment missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, segName(2))); err != nil {
				t.Fatal(err)
			}
		}, "segment 2, where replay must start, is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := closedStore(t)
			c.damage(t, dir)
			s, err := Open(dir, Options{})
			if err == nil {
				s.Close()
				t.Fatal("a damaged store opened")
			}
			if msg := err.Error(); !errors.Is(err, ErrCorrupted) || !strings.Contains(msg, c.says) || !strings.Contains(msg, dir) {
				t.Fatalf("want corruption naming %q and %s: %v", c.says, dir, err)
			}
		})
	}
	// The record is still readable in an undamaged copy: the damage above,
	// not the store, is what Open refused.
	s := openTest(t, closedStore(t))
	if ok, err := s.Has(context.Background(), testKey("x")); err != nil || !ok {
		t.Fatalf("undamaged store lacks its record: %v %v", ok, err)
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
