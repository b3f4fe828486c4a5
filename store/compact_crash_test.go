package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

var errTestCrash = errors.New("test crash")

var stepNames = map[compactStep]string{
	compactListed: "listed", compactMoved: "moved", compactApplied: "applied", compactRemoved: "removed",
}

// TestCompactionCrashAtEachStep: a crash at any step of log compaction
// loses no acknowledged record and brings back no purged one, whether
// badger kept the compaction's writes (a process crash: the page cache
// survives) or lost all of them (they were never synced); and at every
// step, every pointer badger holds leads to a segment that is still there,
// which is what a reader that finds its segment gone relies on when it
// looks again.
func TestCompactionCrashAtEachStep(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(testBase + 100*3600*1000)
	template := t.TempDir()
	s, err := Open(template, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s.opts.hooks.walLimit = 64 << 10
	const n, every = 300, 15
	c := newCorpus(12)
	var kept []Entry
	var items []Item
	for i := range n {
		at := testBase + int64(i)
		if i%every == 0 {
			at = now.UnixMilli() - int64(i) // recent, in every segment
		}
		e := c.record(i, at)
		if i%every == 0 {
			kept = append(kept, e)
		}
		items = append(items, Item{Entry: e})
		if len(items) == 50 {
			if _, err := s.PutMany(ctx, items); err != nil {
				t.Fatal(err)
			}
			items = items[:0]
		}
	}
	settle(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// run copies the template and purges the copy, calling hook at each
	// step of the compaction; it returns the store, still open.
	run := func(hook func(s *Store, step compactStep, seg uint32) error) (*Store, error) {
		t.Helper()
		dir := t.TempDir()
		copyDir(t, template, dir)
		var s *Store
		opts := Options{Now: func() time.Time { return now }, hooks: &testHooks{
			compactStep: func(step compactStep, seg uint32) error { return hook(s, step, seg) },
		}}
		s, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Purge(ctx, time.Hour)
		return s, err
	}

	// A run without a crash lists the steps.
	var steps []string
	segs0, _ := segmentBytes(t, template)
	s, err = run(func(_ *Store, step compactStep, seg uint32) error {
		steps = append(steps, fmt.Sprintf("%s of segment %d", stepNames[step], seg))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	segs1, _ := segmentBytes(t, s.dir)
	mustHoldExactly(t, s, kept)
	s.Close()
	if segs1 >= segs0-2 || len(steps) < 7 {
		t.Fatalf("compaction too small to test: %d segments → %d, steps %v", segs0, segs1, steps)
	}
	t.Logf("%d segments → %d, %d steps", segs0, segs1, len(steps))

	for _, lose := range []bool{false, true} {
		for k := range steps {
			name := fmt.Sprintf("crash after %s (badger loses the compaction's writes: %v)", steps[k], lose)
			calls := 0
			s, err := run(func(s *Store, step compactStep, seg uint32) error {
				if calls == 0 && lose {
					s.opts.hooks.lostBadgerWrites = true
				}
				if !lose {
					if err := pointersResolve(s); err != nil {
						return fmt.Errorf("%s of segment %d: %w", stepNames[step], seg, err)
					}
				}
				calls++
				if calls-1 == k {
					return errTestCrash
				}
				return nil
			})
			if !errors.Is(err, errTestCrash) {
				t.Fatalf("%s: purge returned %v", name, err)
			}
			dir := s.dir
			crashWithoutBadger(t, s)
			s, err = Open(dir, Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatalf("%s: reopen: %v", name, err)
			}
			t.Run(fmt.Sprintf("lose=%v/%d", lose, k), func(t *testing.T) { mustHoldExactly(t, s, kept) })
			s.Close()
		}
	}
}

// pointersResolve reports a record whose pointer in badger (as a reader
// sees it, without waiting for pending applies) leads to a segment that
// is gone or to bytes that fail their checksum.
func pointersResolve(s *Store) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{pRec}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if _, err := s.readPointer(v); err != nil {
				return fmt.Errorf("record %s: %w", it.Item().Key()[1:], err)
			}
		}
		return nil
	})
}

// copyDir copies the regular files of a closed store.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err == nil {
			_, err = io.Copy(dst, src)
			if cerr := dst.Close(); err == nil {
				err = cerr
			}
		}
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
