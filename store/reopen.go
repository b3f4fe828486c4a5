package store

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// A store opened read-only on a full disk (Open, openNeed) becomes
// writable by itself once openNeed is free again: the leader of the group
// commit checks at each write it commits, the writer goroutine every
// readOnlyRetry while nobody writes, and then
// swaps the read-only badger for a writable one in place. Nothing else
// about the store changes: while read-only it wrote nothing, so the
// in-memory orders, the text index, the signer set and the record count
// loaded at Open are still exact, and no batch is in flight (every job was
// refused before it wrote). So the swap is badger's handle and the newest
// log segment's file, and the only readers to keep off are those of
// badger, which hold dbMu shared (view); the log's readers already take
// its own lock, under which openAppend replaces the segment's file.

// readOnlyRetry is how often a read-only store looks for space to become
// writable again while nobody writes.
const readOnlyRetry = 2 * time.Second

// swapWait bounds how long the writer waits for badger's readers to
// finish before a swap; a swap that finds them still busy is tried again
// later, and the write that wanted it is refused as disk full meanwhile.
const swapWait = 2 * time.Second

// view runs fn in a read transaction of badger, with the swap kept out.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	s.rlockDB()
	defer s.dbMu.RUnlock()
	return s.db.View(fn)
}

// rlockDB takes dbMu shared, for a read of badger. While a swap waits
// for the readers already in, new ones wait at the gate, so the swap is
// not starved by a steady stream of reads. The swap waits with TryLock and
// a deadline, so a read nested in another one that waits at the gate
// (while the outer one holds dbMu) ends the swap's wait, not the process:
// the swap is tried again later.
func (s *Store) rlockDB() {
	if gate := s.swapGate.Load(); gate != nil {
		<-*gate
	}
	s.dbMu.RLock()
}

// tryWritable is called by the leader of the group commit (or the idle
// writer goroutine) while the store is read-only. It reopens it writable
// if the disk has room for that now and reports whether the store writes;
// otherwise it refreshes the disk-full state with the space free now.
func (s *Store) tryWritable() bool {
	if !s.readOnly.Load() {
		return true
	}
	free, known := freeBytes(s.dir)
	need := openNeed(s.dir)
	if !known || free < need {
		s.full.Store(&DiskFullError{Path: s.dir, Free: free, Need: need, ReadOnly: true})
		return false
	}
	gate := make(chan struct{})
	s.swapGate.Store(&gate)
	defer func() {
		s.swapGate.Store(nil)
		close(gate)
	}()
	deadline := time.Now().Add(swapWait)
	for !s.dbMu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	defer s.dbMu.Unlock()
	if err := s.reopenWritable(); err != nil {
		if s.opts.Logger != nil {
			s.opts.Logger.Warn("disk space is back but the store could not be opened for writing; it stays read-only",
				"path", s.dir, "free", free, "err", err)
		}
		return false
	}
	s.readOnly.Store(false)
	s.full.Store(nil)
	if s.opts.Logger != nil {
		s.opts.Logger.Info("disk space is back; the store, opened read-only on a full disk, writes again", "path", s.dir, "free", free)
	}
	return true
}

// reopenWritable swaps the read-only badger for a writable one and opens
// the newest log segment for appending. It runs with dbMu held. Should
// badger not open for writing, the read-only one is opened again and the
// store stays as it was; a failure after that (the log) breaks the store
// for writes (reads go on), as a failed log write would.
func (s *Store) reopenWritable() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("closing the read-only badger: %w", err)
	}
	db, err := badger.Open(badgerOptions(s.dir, s.opts, false))
	if err != nil {
		ro, rerr := badger.Open(badgerOptions(s.dir, s.opts, true))
		if rerr != nil {
			// Reads of the closed handle fail with badger.ErrDBClosed.
			err = fmt.Errorf("reopening badger for writing: %w; and again read-only: %v", err, rerr)
			s.breakWith(err)
			return err
		}
		s.db = ro
		return fmt.Errorf("reopening badger for writing: %w", err)
	}
	s.db = db
	err = s.checkFormat() // a cmbnode-store-3 store is marked -4 before it is written
	if err == nil {
		err = s.openLogForAppend()
	}
	if err != nil {
		err = fmt.Errorf("opening the store for writing once space was back: %w", err)
		s.breakWith(err)
	}
	return err
}

// openLogForAppend makes the newest segment, opened for reads by
// openSegmentsReadOnly, the one frames are appended to, as replaySegments
// would at a writable Open. The read-only Open found no frame after the
// replay mark, and nothing has written since, so there is nothing to
// apply again: a frame found there would mean another writer, and is
// refused rather than overwritten.
func (s *Store) openLogForAppend() error {
	l := s.log
	markSeg, markOff, marked, err := s.readMark()
	if err != nil {
		return err
	}
	n := l.seg
	if !marked || markSeg > n {
		return fmt.Errorf("%w: the replay mark (segment %d) is past the newest log segment %d", ErrCorrupted, markSeg, n)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, segName(n)), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening log segment for writing: %w", err)
	}
	nonce, err := readSegmentHeader(f, n)
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil {
			start := int64(segDataStart)
			if markSeg == n {
				start = markOff
			}
			frames := 0
			var end int64
			end, err = scanFrames(f, nonce, start, fi.Size(), func(int64, []byte) error { frames++; return nil })
			if err == nil && frames > 0 {
				err = fmt.Errorf("log segment %d has %d frames after the replay mark that a read-only store did not write", n, frames)
			}
			if err == nil {
				l.mu.RLock()
				old := l.files[n]
				l.mu.RUnlock()
				if err = l.openAppend(f, n, nonce, end); err == nil {
					if old != nil && old != f {
						old.Close() // no reader holds it: reads take l.mu around it
					}
					if markSeg != n || markOff != end {
						return s.mark()
					}
					return nil
				}
			}
		}
	}
	f.Close()
	return err
}
