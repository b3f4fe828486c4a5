package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrDiskFull is matched (errors.Is) by every *DiskFullError.
var ErrDiskFull = errors.New("disk full")

// DiskFullError means the store did not write because the file system
// holding it has too little free space. Nothing of the refused write is
// on disk and nothing acknowledged before is lost; reads go on. Writes
// resume by themselves once Free reaches Need again, also after a start
// on a disk too full to open badger for writing (ReadOnly): the store then
// reopens itself writable, at the next write or within a few seconds.
type DiskFullError struct {
	Path     string // the store directory
	Free     uint64 // bytes free for the store's user when it refused
	Need     uint64 // bytes free the store keeps before it writes
	ReadOnly bool   // opened read-only on a full disk; Need is then what opening for writing takes
	Err      error  // the write's own error (ENOSPC), or nil when the store refused beforehand
}

func (e *DiskFullError) Error() string {
	msg := fmt.Sprintf("disk full: %s has %s free, the store needs %s free to write", e.Path, humanBytes(e.Free), humanBytes(e.Need))
	if e.ReadOnly {
		msg += "; it was opened read-only on the full disk: free space and it writes again by itself, no restart needed"
	} else {
		msg += "; free space and writes resume by themselves"
	}
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrDiskFull) match.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

func (e *DiskFullError) Unwrap() error { return e.Err }

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// noSpace reports an error of a file system out of room (or of quota).
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		err != nil && strings.Contains(err.Error(), "no space left on device")
}

// freeBytes is the space left in dir's file system for an unprivileged
// writer; ok is false where the system does not say.
func freeBytes(dir string) (free uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}

// reserve is the free space the store keeps before it writes to its log:
// room for badger to flush a full memtable as a table and start the next
// one, and for one growth of the log. Badger writes its tables and
// memtables through memory maps, and a page it touches on a file system
// with no room left kills the process (SIGBUS) instead of returning an
// error: the store stops writing well before that, so badger always has
// room for what the log has already acknowledged.
func (o Options) reserve() uint64 {
	if o.MinFreeBytes > 0 {
		return uint64(o.MinFreeBytes)
	}
	return uint64(2*o.MemTableBytes) + 2*walGrow
}

// openNeed is the free space Open needs to open badger for writing: its
// lock file and new memtable and value-log headers (a few pages, rounded
// up to 1 MiB), the memtables a crash left, which badger flushes to
// tables at once, and the pointers of frames that may need applying again
// (estimated as a quarter of the newest two segments). Below it the store
// opens read-only.
func openNeed(dir string) uint64 {
	need := uint64(1 << 20)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return need
	}
	var segs []int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		switch name := e.Name(); {
		case strings.HasSuffix(name, ".mem"):
			need += uint64(allocated(filepath.Join(dir, name), fi))
		case strings.HasPrefix(name, segPrefix) && strings.HasSuffix(name, segSuffix):
			segs = append(segs, fi.Size())
		}
	}
	for i := max(len(segs)-2, 0); i < len(segs); i++ {
		need += uint64(segs[i] / 4)
	}
	return need
}

// allocated is the space a (possibly sparse) file takes.
func allocated(path string, fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// diskFull builds the error for a write refused (err nil) or failed (err
// ENOSPC) for want of space, and records it for DiskState.
func (s *Store) diskFull(err error, need uint64) *DiskFullError {
	if s.readOnly.Load() {
		return s.full.Load()
	}
	free, _ := freeBytes(s.dir)
	e := &DiskFullError{Path: s.dir, Free: free, Need: need, Err: err}
	if s.full.Swap(e) == nil && s.opts.Logger != nil {
		s.opts.Logger.Warn("store refuses writes: disk full; reads go on, writes resume once space is freed",
			"path", s.dir, "free", free, "need", e.Need, "err", err)
	}
	return e
}

// DiskState returns the disk-full condition the store is in, or nil when
// it writes. A store that refused a write for want of space reports it
// until space is back (looked up here), when it is writable again. A
// store opened read-only reports so until its writer has reopened it
// writable (reopen.go), at the next write or within readOnlyRetry.
func (s *Store) DiskState() *DiskFullError {
	e := s.full.Load()
	if e == nil || e.ReadOnly {
		return e
	}
	if free, ok := freeBytes(s.dir); ok && free >= e.Need {
		if s.full.CompareAndSwap(e, nil) && s.opts.Logger != nil {
			s.opts.Logger.Info("disk space is back; the store writes again", "path", s.dir, "free", free)
		}
		return nil
	}
	return e
}

// openSegmentsReadOnly opens the log for reads only (a store opened on a
// full disk). Frames since the replay mark would have to be applied to
// badger, which cannot be written: such a store does not open.
func (s *Store) openSegmentsReadOnly(l *segLog) error {
	segs, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	markSeg, markOff, marked, err := s.readMark()
	if err != nil {
		return err
	}
	if !marked || len(segs) == 0 || markSeg > segs[len(segs)-1] {
		return s.full.Load() // nothing to read, or something for a writable Open to sort out
	}
	pending := 0
	for _, n := range segs {
		f, err := os.Open(filepath.Join(s.dir, segName(n)))
		if err != nil {
			return fmt.Errorf("opening log segment: %w", err)
		}
		l.files[n] = f
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("opening log segment: %w", err)
		}
		if n < markSeg {
			continue
		}
		nonce, err := readSegmentHeader(f, n)
		if err != nil {
			return err
		}
		start := int64(segDataStart)
		if n == markSeg {
			start = markOff
		}
		if _, err := scanFrames(f, nonce, start, fi.Size(), func(int64, []byte) error { pending++; return nil }); err != nil {
			return err
		}
		l.seg, l.off = n, fi.Size()
		l.end.Store(fi.Size())
	}
	if pending > 0 {
		e := *s.full.Load()
		e.Err = fmt.Errorf("%d log frames written since the last checkpoint must be applied to badger before the store can be read", pending)
		return &e
	}
	l.marked = markSeg
	return nil
}

// roomForCheckpoint: a checkpoint starts a segment and has badger synced;
// with less than the reserve free it waits, and the log goes on in the
// current segment.
func (s *Store) roomForCheckpoint() bool {
	free, ok := freeBytes(s.dir)
	return !ok || free >= s.opts.reserve()
}
