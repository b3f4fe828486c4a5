package store

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// compactorWorkers counts the goroutines running badger's compaction
// workers in the process (no store test runs in parallel).
func compactorWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "badger/v4.(*levelsController).runCompactor(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitFor polls cond until it holds or a deadline far beyond any
// reasonable scheduling delay passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The store relies on badger's own pause and resume of its workers; a
// badger upgrade that changes them must fail here.
func TestCompactorsPauseAndResume(t *testing.T) {
	base := compactorWorkers()
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithNumCompactors(2).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitFor(t, "badger started its 2 workers", func() bool { return compactorWorkers() == base+2 })
	pauseCompactors(db)
	if got := compactorWorkers(); got != base { // the pause waits for them to end
		t.Fatalf("%d compaction workers after the pause, want %d", got, base)
	}
	resumeCompactors(db)
	waitFor(t, "the resume started 2 workers", func() bool { return compactorWorkers() == base+2 })
	pauseCompactors(db) // Close stops paused workers again
}

// A quiet store pauses badger's workers, the first write resumes them,
// and while it is quiet nothing wakes them.
func TestQuietStorePausesCompactors(t *testing.T) {
	base := compactorWorkers()
	s, err := Open(t.TempDir(), Options{hooks: &testHooks{compactQuiet: 20 * time.Millisecond, compactCheck: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &s.compact
	waitFor(t, "the quiet store paused its compactors", func() bool { return g.pauses.Load() == 1 && g.paused.Load() })
	if got := compactorWorkers(); got != base {
		t.Fatalf("%d compaction workers while paused, want %d", got, base)
	}
	time.Sleep(100 * time.Millisecond) // five quiet periods
	if r := g.resumes.Load(); r != 0 {
		t.Fatalf("%d resumes with nothing written", r)
	}

	mustPut(t, s, mkEntry("a1", testBase, "hello"))
	s.Count() // applied to badger
	waitFor(t, "the write resumed the compactors", func() bool { return g.resumes.Load() == 1 })
	waitFor(t, "the store paused again once quiet", func() bool { return g.pauses.Load() == 2 && g.paused.Load() })
	if got := compactorWorkers(); got != base {
		t.Fatalf("%d compaction workers while paused again, want %d", got, base)
	}
}

// levels reports how many tables badger's level 0 holds, and the bytes
// below it, which only compactions put there.
func levels(s *Store) (l0Tables int, below int64) {
	s.rlockDB()
	defer s.dbMu.RUnlock()
	for _, l := range s.db.Levels() {
		if l.Level == 0 {
			l0Tables = l.NumTables
		} else {
			below += l.Size
		}
	}
	return l0Tables, below
}

// compactedSince waits until the store is paused with level 0 compacted
// (fewer tables than the 4 at which badger compacts it) and more bytes
// below it than before, and returns them.
func compactedSince(t *testing.T, s *Store, before int64, what string) int64 {
	t.Helper()
	var below int64
	waitFor(t, what, func() bool {
		var l0 int
		l0, below = levels(s)
		return s.compact.paused.Load() && l0 < 4 && below > before
	})
	return below
}

// Compaction still happens: bursts of writes with pauses between them are
// compacted, and so are writes the store does not announce (badger's
// own), through the look a paused store takes now and then.
func TestPausedCompactorsStillCompact(t *testing.T) {
	s, err := Open(t.TempDir(), Options{MemTableBytes: 256 << 10,
		hooks: &testHooks{compactQuiet: 20 * time.Millisecond, compactCheck: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &s.compact
	ctx := context.Background()
	var below int64
	// Each burst is more memtables' worth of edge keys than the level-0
	// tables badger keeps before it compacts (4).
	for burst := range 3 {
		waitFor(t, "paused before the burst", func() bool { return g.paused.Load() })
		items := make([]Item, 0, 2000)
		for i := range 2000 {
			e := mkEntry(fmt.Sprintf("b%d-%d", burst, i), testBase+int64(i))
			for p := range 3 {
				e.Parents = append(e.Parents, testKey(fmt.Sprintf("p%d-%d-%d", burst, i, p)))
			}
			items = append(items, Item{Entry: e})
		}
		if _, err := s.PutMany(ctx, items); err != nil {
			t.Fatal(err)
		}
		below = compactedSince(t, s, below, fmt.Sprintf("burst %d compacted", burst))
	}

	// Writes straight to badger are not announced.
	waitFor(t, "paused", func() bool { return g.paused.Load() })
	resumes := g.resumes.Load()
	val := make([]byte, 200) // under valueThreshold: in the tree
	for i := range 40000 {
		k := []byte(fmt.Sprintf("\xffraw-%08d", i))
		if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(k, val) }); err != nil {
			t.Fatal(err)
		}
	}
	compactedSince(t, s, below, "unannounced writes compacted")
	if g.resumes.Load() == resumes {
		t.Fatal("compacted without a resume")
	}
}
