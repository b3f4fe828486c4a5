package store

import (
	"cmp"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	badger "github.com/dgraph-io/badger/v4"
)

// Badger's compaction workers (two, its minimum) each wake every 50 ms,
// a fixed interval in badger v4, whether or not the tree needs anything:
// on a daemon with no traffic that is nearly all of its CPU, every wake
// costing two thread switches. The tree only changes when something is
// written to badger (a full memtable becomes a level-0 table, compactions
// move tables down), so the store pauses the workers once nothing has been
// written for compactQuiet and no level needs compacting by badger's own
// rule (every level's score below 1, Levels), and resumes them at the
// first write after that: compaction is never held back while there is
// anything to compact, and no write waits for the resume. Writes the store
// does not announce (badger's own, e.g. the memtable flushed at Open) are
// caught by a look every compactCheck while paused.

// compactQuiet is how long after the last write to badger the workers run
// on, and compactCheck how often a paused store looks whether a level
// needs compacting all the same.
const (
	compactQuiet = 2 * time.Second
	compactCheck = 30 * time.Second
)

// badger's own pause and resume of its compaction workers, which its
// Flatten, DropPrefix and StreamWriter use around their work. Both are
// no-ops on a read-only DB (it has no workers). TestCompactorsPauseAndResume
// fails, or the build does not link, should a badger upgrade change them.
//
//go:linkname pauseCompactors github.com/dgraph-io/badger/v4.(*DB).stopCompactions
func pauseCompactors(db *badger.DB)

//go:linkname resumeCompactors github.com/dgraph-io/badger/v4.(*DB).startCompactions
func resumeCompactors(db *badger.DB)

// compactGate is the state the writers and the governor share.
type compactGate struct {
	writes atomic.Uint64 // writes to badger so far
	paused atomic.Bool
	wake   chan struct{} // cap 1: a write came while paused
	done   chan struct{} // closed when the governor has returned
	// pauses and resumes count what the governor did.
	pauses, resumes atomic.Int64
}

func (g *compactGate) init() {
	g.wake, g.done = make(chan struct{}, 1), make(chan struct{})
}

// wroteBadger is called after each write the store makes to badger: it
// ends a pause at once.
func (s *Store) wroteBadger() {
	s.compact.writes.Add(1)
	if s.compact.paused.Load() {
		select {
		case s.compact.wake <- struct{}{}:
		default:
		}
	}
}

// compactionSettled reports whether badger would find nothing to compact:
// Levels sets a score only on the levels it would pick.
func compactionSettled(db *badger.DB) bool {
	for _, l := range db.Levels() {
		if l.Score >= 1 {
			return false
		}
	}
	return true
}

// governCompactors pauses badger's compaction workers while the store is
// quiet and resumes them on the next write, until the store closes; Close
// waits for it before closing badger, whose Close stops the workers,
// paused or not.
func (s *Store) governCompactors() {
	g := &s.compact
	defer close(g.done)
	quietFor, checkEvery := cmp.Or(s.opts.hooks.compactQuiet, compactQuiet), cmp.Or(s.opts.hooks.compactCheck, compactCheck)
	quiet := time.NewTimer(quietFor)
	defer quiet.Stop()
	check := time.NewTicker(checkEvery)
	check.Stop()
	defer check.Stop()
	last := g.writes.Load()
	var paused *badger.DB // the handle whose workers are paused
	resume := func() {
		s.resume(paused)
		paused = nil
		check.Stop()
		last = g.writes.Load()
		quiet.Reset(quietFor)
	}
	for {
		var quietC, checkC <-chan time.Time
		if paused == nil {
			quietC = quiet.C
		} else {
			checkC = check.C
		}
		select {
		case <-s.closing:
			return
		case <-quietC:
			if now := g.writes.Load(); now != last {
				last = now
				quiet.Reset(quietFor)
				continue
			}
			if paused = s.pause(last); paused == nil {
				last = g.writes.Load()
				quiet.Reset(quietFor)
				continue
			}
			check.Reset(checkEvery)
		case <-g.wake:
			if paused != nil {
				resume()
			}
		case <-checkC:
			s.rlockDB()
			wake := s.db != paused || !compactionSettled(paused)
			s.dbMu.RUnlock()
			if wake {
				resume()
			}
		}
	}
}

// pause pauses the workers of badger's handle if no write came since the
// count was last and nothing needs compacting, and returns the handle; nil
// if it did not pause.
func (s *Store) pause(last uint64) *badger.DB {
	g := &s.compact
	// Marked paused before the count is read again: a write after that
	// sends a wake, one before it is seen here.
	g.paused.Store(true)
	s.rlockDB()
	defer s.dbMu.RUnlock()
	db := s.db
	if g.writes.Load() != last || !compactionSettled(db) {
		g.paused.Store(false)
		return nil
	}
	pauseCompactors(db)
	g.pauses.Add(1)
	if !compactionSettled(db) { // the compaction the pause waited for left work
		resumeCompactors(db)
		g.resumes.Add(1)
		g.paused.Store(false)
		return nil
	}
	return db
}

// resume resumes the workers of paused unless badger's handle was swapped
// since (reopenWritable): a new handle runs its own.
func (s *Store) resume(paused *badger.DB) {
	g := &s.compact
	g.paused.Store(false)
	select {
	case <-g.wake:
	default:
	}
	s.rlockDB()
	if s.db == paused {
		resumeCompactors(paused)
	}
	s.dbMu.RUnlock()
	g.resumes.Add(1)
}
