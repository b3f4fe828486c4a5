package store

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The record log is written once and read forever. Each group commit is
// one frame in the current segment file: written with O_DIRECT|O_DSYNC
// where the file system allows it (one pwrite that returns once the frame
// is on stable storage), through the page cache and fdatasync elsewhere.
// The frame is what makes the batch durable, and it is also where the
// batch's records stay: badger holds, for each record, only a pointer to
// its bytes in a segment (segPtr), so a record is written to disk once
// and badger's value log and memtable see a few bytes per record instead
// of a kilobyte.
//
// Everything else a batch writes (lineage edges, the roster, deletes) is in
// the frame too and is applied to badger whole. Badger runs without its own
// syncs and is made durable at checkpoints: after a segment has taken
// walCheckpoint bytes, badger is synced, a new segment starts, and the
// position from which frames must be applied again after a crash (the
// replay mark) is stored in badger and synced. Open applies every frame
// from the mark on, in order, which is idempotent.
//
// Segment layout: a 4096-byte header (magic, segment number, a random
// nonce, crc32c), then frames back to back from segDataStart, each
// [magic u32][payload len u32][nonce u64][crc32c u32] and the payload. A
// frame counts only if its magic, nonce and CRC match; the nonce keeps
// bytes inside a record (which a peer chose) from ever passing for a frame.
// Replay of the newest segment stops at the first frame that does not
// count: a torn frame can only be the last written, because a frame is
// written only once the one before it is durable. Direct writes must cover
// whole blocks, so a frame's write rewrites the start of its first block
// with the bytes already there; a torn rewrite leaves those bytes as they
// were either way.
const (
	segPrefix     = "seg-"
	segSuffix     = ".log"
	segMagic      = "CMBSEG01"
	segDataStart  = 4096
	segFrameMagic = 0x434d4253 // "CMBS"
	segFrameHdr   = 20
	walAlign      = 4096
	// walGrow is how much zero-filled room is added at a time, so that
	// frame writes overwrite allocated blocks and need no metadata commit.
	walGrow = 4 << 20
	// walCheckpoint is how many bytes of frames trigger a checkpoint (and
	// a new segment); it bounds replay work after a crash.
	walCheckpoint = 32 << 20
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// errNoRoom: growing the log would leave less free space than its reserve.
var errNoRoom = errors.New("too little free space to grow the log")

// noRoomError is errNoRoom with the free space the growth needed.
type noRoomError struct{ need uint64 }

func (e *noRoomError) Error() string        { return errNoRoom.Error() }
func (e *noRoomError) Is(target error) bool { return target == errNoRoom }

// errSegmentGone: a pointer read raced with compaction removing its
// segment; reading the record's key again finds it moved.
var errSegmentGone = errors.New("log segment removed")

type segLog struct {
	dir string
	// reserve is the free space grow leaves on the file system (errNoRoom).
	reserve uint64

	// Written by the leader of the group commit (and Open/Close) only.
	f      *os.File // current segment
	direct *os.File // f opened O_DIRECT|O_DSYNC; nil where refused
	nonce  uint64
	off    int64 // end of the last frame
	size   int64 // bytes allocated (zero-filled or written) and synced
	since  int64 // frame bytes since the last checkpoint
	tail   []byte
	buf    []byte
	// end is off, for readers on other goroutines (Stats).
	end atomic.Int64

	mu    sync.RWMutex
	seg   uint32              // current segment number
	files map[uint32]*os.File // every segment, for reads
	// marked is the segment of the durable replay mark: segments before it
	// are never replayed, so compaction may remove them.
	marked uint32
}

func segName(n uint32) string { return fmt.Sprintf("%s%08d%s", segPrefix, n, segSuffix) }

// listSegments returns the segment numbers in dir, in order.
func listSegments(dir string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing log segments: %w", err)
	}
	var out []uint32
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 10, 32)
		if err != nil || n == 0 {
			continue
		}
		out = append(out, uint32(n))
	}
	slices.Sort(out)
	return out, nil
}

// createSegment makes segment n, empty and durable, with a fresh nonce.
func createSegment(dir string, n uint32) (*os.File, uint64, error) {
	path := filepath.Join(dir, segName(n))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("creating log segment: %w", err)
	}
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("creating log segment: %w", err)
	}
	nonce := binary.LittleEndian.Uint64(nb[:])
	hdr := make([]byte, segDataStart)
	copy(hdr, segMagic)
	binary.LittleEndian.PutUint32(hdr[8:], n)
	binary.LittleEndian.PutUint64(hdr[12:], nonce)
	binary.LittleEndian.PutUint32(hdr[20:], crc32.Checksum(hdr[:20], walCRC))
	if _, err := f.WriteAt(hdr, 0); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("writing log segment header: %w", err)
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("syncing log segment header: %w", err)
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, nonce, nil
}

// readSegmentHeader returns the nonce of segment n, whose file is f. A
// header that is short or wrong is reported as ErrCorrupted; a read that
// fails is reported as it failed.
func readSegmentHeader(f *os.File, n uint32) (uint64, error) {
	var hdr [24]byte
	if _, err := f.ReadAt(hdr[:], 0); errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("%w: log segment %d is shorter than its header", ErrCorrupted, n)
	} else if err != nil {
		return 0, fmt.Errorf("reading log segment %d header: %w", n, err)
	}
	if string(hdr[:8]) != segMagic || crc32.Checksum(hdr[:20], walCRC) != binary.LittleEndian.Uint32(hdr[20:]) {
		return 0, fmt.Errorf("%w: log segment %d has no valid header", ErrCorrupted, n)
	}
	if got := binary.LittleEndian.Uint32(hdr[8:]); got != n {
		return 0, fmt.Errorf("%w: log segment %d says it is segment %d", ErrCorrupted, n, got)
	}
	return binary.LittleEndian.Uint64(hdr[12:]), nil
}

// scanFrames calls fn with each valid frame's payload and the file offset
// where the payload starts, from off until the first frame that does not
// count, and returns where that frame starts.
func scanFrames(f *os.File, nonce uint64, off, size int64, fn func(payOff int64, payload []byte) error) (int64, error) {
	var fh [segFrameHdr]byte
	for off+segFrameHdr <= size {
		if _, err := f.ReadAt(fh[:], off); err != nil {
			return off, fmt.Errorf("reading log frame: %w", err)
		}
		n := int64(binary.LittleEndian.Uint32(fh[4:]))
		if binary.LittleEndian.Uint32(fh[:]) != segFrameMagic || binary.LittleEndian.Uint64(fh[8:]) != nonce ||
			off+segFrameHdr+n > size {
			break
		}
		p := make([]byte, n)
		if _, err := f.ReadAt(p, off+segFrameHdr); err != nil {
			return off, fmt.Errorf("reading log frame: %w", err)
		}
		if crc32.Update(crc32.Checksum(fh[8:16], walCRC), walCRC, p) != binary.LittleEndian.Uint32(fh[16:]) {
			break
		}
		if err := fn(off+segFrameHdr, p); err != nil {
			return off, err
		}
		off += segFrameHdr + n
	}
	return off, nil
}

// openAppend makes f (segment n, valid frames ending at off) the segment
// frames are appended to. Anything after off is a torn frame and goes.
func (l *segLog) openAppend(f *os.File, n uint32, nonce uint64, off int64) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("opening log segment: %w", err)
	}
	if fi.Size() != off {
		if err := f.Truncate(off); err != nil {
			return fmt.Errorf("truncating log segment after its last frame: %w", err)
		}
		if err := fdatasync(f); err != nil {
			return fmt.Errorf("truncating log segment after its last frame: %w", err)
		}
	}
	l.tail = make([]byte, off-alignDown(off), walAlign)
	if _, err := f.ReadAt(l.tail, alignDown(off)); err != nil {
		return fmt.Errorf("reading log segment: %w", err)
	}
	if l.direct != nil {
		l.direct.Close()
		l.direct = nil
	}
	if d, err := os.OpenFile(filepath.Join(l.dir, segName(n)), os.O_RDWR|syscall.O_DIRECT|syscall.O_DSYNC, 0); err == nil {
		l.direct = d
	}
	l.f, l.nonce, l.off, l.size, l.since = f, nonce, off, off, 0
	l.end.Store(off)
	l.mu.Lock()
	l.seg = n
	l.files[n] = f
	l.mu.Unlock()
	return nil
}

// rotate seals the current segment and starts segment seg+1.
func (l *segLog) rotate() error {
	n := l.seg + 1
	f, nonce, err := createSegment(l.dir, n)
	if err != nil {
		return err
	}
	// The sealed segment keeps its frames, not its zero-filled room.
	if err := l.f.Truncate(l.off); err != nil {
		f.Close()
		return fmt.Errorf("sealing log segment: %w", err)
	}
	return l.openAppend(f, n, nonce, segDataStart)
}

// payloadOff is where the next frame's payload will start in the current
// segment.
func (l *segLog) payloadOff() int64 { return l.off + segFrameHdr }

// append writes one frame; it is durable once sync returns.
func (l *segLog) append(payload []byte) error {
	n := int64(segFrameHdr + len(payload))
	end := l.off + n
	if alignUp(end) > l.size {
		if err := l.grow(alignUp(end)); err != nil {
			return err
		}
	}
	// b is the file from the block the frame starts in to the end of the
	// block it ends in: what a direct write must cover.
	start := alignDown(l.off)
	b := alignedBuf(&l.buf, int(alignUp(end)-start))
	lead := copy(b, l.tail)
	h := b[lead : lead+int(n)]
	binary.LittleEndian.PutUint32(h[0:], segFrameMagic)
	binary.LittleEndian.PutUint32(h[4:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:], l.nonce)
	binary.LittleEndian.PutUint32(h[16:], crc32.Update(crc32.Checksum(h[8:16], walCRC), walCRC, payload))
	copy(h[segFrameHdr:], payload)
	clear(b[lead+int(n):])
	var err error
	if l.direct != nil {
		_, err = l.direct.WriteAt(b, start)
		if err != nil && errors.Is(err, syscall.EINVAL) {
			// Opened, but the file system refuses this direct write after
			// all (alignment rules of its own): use the page cache from now on.
			l.direct.Close()
			l.direct = nil
			_, err = l.f.WriteAt(h, l.off)
		}
	} else {
		_, err = l.f.WriteAt(h, l.off)
	}
	if err != nil {
		return fmt.Errorf("writing log frame: %w", err)
	}
	l.tail = append(l.tail[:0], b[alignDown(end)-start:end-start]...)
	l.off = end
	l.end.Store(end)
	l.since += n
	return nil
}

func alignUp(n int64) int64   { return (n + walAlign - 1) &^ (walAlign - 1) }
func alignDown(n int64) int64 { return n &^ (walAlign - 1) }

// grow zero-fills the segment up to at least need and syncs the new size,
// so that frame writes only overwrite blocks that are already allocated.
// directZeros returns walGrow zero bytes at a walAlign boundary, for a
// direct write, and the function that gives them back. They are a
// read-only anonymous mapping, which the kernel backs with its one zero
// page: no heap to clear and collect per growth (4 MiB a growth would
// bring the collector on sooner at every ~1.5 s of 1,000 CMB/s), and no
// resident memory while held. Where the mapping is refused they are heap,
// allocated per growth.
func directZeros() ([]byte, func()) {
	if m, err := syscall.Mmap(-1, 0, walGrow, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON); err == nil {
		if uintptr(unsafe.Pointer(&m[0]))&(walAlign-1) == 0 {
			return m, func() { _ = syscall.Munmap(m) }
		}
		_ = syscall.Munmap(m)
	}
	zeros := make([]byte, walGrow+walAlign)
	skip := int(-uintptr(unsafe.Pointer(&zeros[0])) & (walAlign - 1))
	return zeros[skip : skip+walGrow], func() {}
}

func (l *segLog) grow(need int64) error {
	target := alignUp(l.size)
	for target < need {
		target += walGrow
	}
	// Nothing is written, so nothing is to undo: the frame waits for room.
	if need := uint64(target-l.size) + l.reserve; !l.roomFor(need) {
		return &noRoomError{need: need}
	}
	if l.direct != nil && l.size%walAlign == 0 {
		// One direct write of zeros, durable with its new size when it
		// returns: no page cache to fill now and to drop again when the
		// frames overwrite it.
		zero, release := directZeros()
		defer release()
		for off := l.size; off < target; off += walGrow {
			if _, err := l.direct.WriteAt(zero, off); err != nil {
				return fmt.Errorf("growing log segment: %w", err)
			}
		}
		l.size = target
		return nil
	}
	zero := make([]byte, 1<<20)
	for off := l.size; off < target; {
		n := min(int64(len(zero)), target-off)
		if _, err := l.f.WriteAt(zero[:n], off); err != nil {
			return fmt.Errorf("growing log segment: %w", err)
		}
		off += n
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("growing log segment: %w", err)
	}
	l.size = target
	return nil
}

// roomFor reports whether the file system has need bytes free (or does
// not say).
func (l *segLog) roomFor(need uint64) bool {
	free, ok := freeBytes(l.dir)
	return !ok || free >= need
}

func (l *segLog) sync() error {
	if l.direct != nil {
		return nil // O_DSYNC: every frame write was durable when it returned
	}
	if err := fdatasync(l.f); err != nil {
		return fmt.Errorf("syncing log segment: %w", err)
	}
	return nil
}

// seal drops the current segment's unused room after a clean close.
func (l *segLog) seal() error {
	if err := l.f.Truncate(l.off); err != nil {
		return fmt.Errorf("sealing log segment: %w", err)
	}
	if err := fdatasync(l.f); err != nil {
		return fmt.Errorf("sealing log segment: %w", err)
	}
	l.size = l.off
	return nil
}

func (l *segLog) close() {
	if l.direct != nil {
		l.direct.Close()
		l.direct = nil
	}
	l.mu.Lock()
	for n, f := range l.files {
		f.Close()
		delete(l.files, n)
	}
	l.mu.Unlock()
}

// current returns the segment being written and the one of the durable
// replay mark.
func (l *segLog) current() (seg, marked uint32) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.seg, l.marked
}

// sealed returns the numbers of the segments before the current one and
// their sizes.
func (l *segLog) sealed() (map[uint32]int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := map[uint32]int64{}
	for n, f := range l.files {
		if n == l.seg {
			continue
		}
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("sizing log segment %d: %w", n, err)
		}
		out[n] = fi.Size()
	}
	return out, nil
}

// bytes sums the segments' sizes: the current one up to its last frame.
func (l *segLog) bytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for seg, f := range l.files {
		if seg == l.seg {
			n += l.end.Load()
			continue
		}
		if fi, err := f.Stat(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// remove deletes a sealed segment before the replay mark.
func (l *segLog) remove(n uint32) error {
	l.mu.Lock()
	f, ok := l.files[n]
	if !ok || n >= l.marked || n == l.seg {
		l.mu.Unlock()
		return nil
	}
	delete(l.files, n)
	l.mu.Unlock()
	f.Close()
	if err := os.Remove(filepath.Join(l.dir, segName(n))); err != nil {
		return fmt.Errorf("removing log segment: %w", err)
	}
	return syncDir(l.dir)
}

// A segPtr locates a record's bytes in the log; it is badger's value for
// the record's key.
type segPtr struct {
	seg uint32
	off int64
	n   uint32
	crc uint32
}

const recPtrTag = 0xF1

// ptrTo locates val, which starts at off in segment seg. The leader of the group commit and
// replay both build pointers with it, so a replayed pointer is the one the
// write gave badger.
func ptrTo(seg uint32, off int64, val []byte) segPtr {
	return segPtr{seg: seg, off: off, n: uint32(len(val)), crc: crc32.Checksum(val, walCRC)}
}

// maxPtrLen bounds an encoded segPtr: the tag, three uvarints (of at most
// 32, 64 and 32 bits) and the CRC.
const maxPtrLen = 1 + binary.MaxVarintLen32 + binary.MaxVarintLen64 + binary.MaxVarintLen32 + 4

func (p segPtr) encode() []byte { return p.appendTo(make([]byte, 0, maxPtrLen)) }

// appendTo appends p's encoding to b.
func (p segPtr) appendTo(b []byte) []byte {
	b = append(b, recPtrTag)
	b = binary.AppendUvarint(b, uint64(p.seg))
	b = binary.AppendUvarint(b, uint64(p.off))
	b = binary.AppendUvarint(b, uint64(p.n))
	return binary.LittleEndian.AppendUint32(b, p.crc)
}

func decodePtr(v []byte) (segPtr, error) {
	var p segPtr
	if len(v) == 0 || v[0] != recPtrTag {
		return p, errors.New("not a record pointer")
	}
	r := reader{b: v[1:]}
	seg, off, n := r.uvarint(), r.uvarint(), r.uvarint()
	if r.err != nil || len(r.b) != 4 || seg > 1<<32-1 || n > 1<<32-1 || off > 1<<62 {
		return p, errors.New("malformed record pointer")
	}
	return segPtr{seg: uint32(seg), off: int64(off), n: uint32(n), crc: binary.LittleEndian.Uint32(r.b)}, nil
}

// read returns the bytes p points to, checked against their CRC. Bytes
// that fail it, or lie past the segment's end, are ErrCorrupted; a read
// that fails is reported as it failed.
func (l *segLog) read(p segPtr) ([]byte, error) {
	buf := make([]byte, p.n)
	l.mu.RLock()
	f, ok := l.files[p.seg]
	if !ok {
		l.mu.RUnlock()
		return nil, fmt.Errorf("%w: segment %d", errSegmentGone, p.seg)
	}
	_, err := f.ReadAt(buf, p.off)
	l.mu.RUnlock()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: record in log segment %d at %d runs past the segment's end", ErrCorrupted, p.seg, p.off)
	}
	if err != nil {
		return nil, fmt.Errorf("reading log segment %d at %d: %w", p.seg, p.off, err)
	}
	if crc32.Checksum(buf, walCRC) != p.crc {
		return nil, fmt.Errorf("%w: record in log segment %d at %d fails its checksum", ErrCorrupted, p.seg, p.off)
	}
	return buf, nil
}
