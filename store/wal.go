package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// Stores of format 2 made batches durable in a write-ahead log of their
// own, cmbnode.wal, and kept records in badger; the log segments
// (seglog.go) replaced it. A crash of such a build leaves frames in it
// that badger may lack, so Open applies them once, syncs badger and
// removes the file.
//
// Layout: a 512-byte header (magic, epoch, crc) in the first block; frames
// from legacyDataStart, each [magic u32][payload len u32][epoch u64][crc32c
// u32] and the payload, padded to a multiple of walAlign in "CMBWAL02" logs
// and back to back in "CMBWAL01" ones. A frame counts only if its magic,
// epoch and CRC match; replay stops at the first one that does not.
const (
	legacyWALName    = "cmbnode.wal"
	legacyMagic      = "CMBWAL02"
	legacyMagicV1    = "CMBWAL01"
	legacyFrameMagic = 0x434d4246 // "CMBF"
	legacyDataStart  = 4096
)

// readLegacyWAL returns the payloads of the current epoch's valid frames
// of dir's cmbnode.wal, oldest first; found is false if there is none.
func readLegacyWAL(dir string) (frames [][]byte, found bool, err error) {
	f, err := os.Open(filepath.Join(dir, legacyWALName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("opening old write-ahead log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, true, fmt.Errorf("opening old write-ahead log: %w", err)
	}
	size := fi.Size()
	if size < legacyDataStart {
		return nil, true, nil
	}
	var hdr [512]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil, true, fmt.Errorf("reading old write-ahead log header: %w", err)
	}
	magic := string(hdr[:8])
	if magic != legacyMagic && magic != legacyMagicV1 || crc32.Checksum(hdr[:16], walCRC) != binary.LittleEndian.Uint32(hdr[16:]) {
		// A header was rewritten only at a checkpoint, after badger was
		// synced: a torn one stands for a log with nothing to replay.
		return nil, true, nil
	}
	epoch := binary.LittleEndian.Uint64(hdr[8:])
	kind := frameKind{magic: legacyFrameMagic, padded: magic == legacyMagic}
	_, err = scanFrames(f, kind, epoch, legacyDataStart, size, func(_ int64, p []byte) error {
		frames = append(frames, p)
		return nil
	})
	if err != nil {
		return nil, true, fmt.Errorf("reading old write-ahead log: %w", err)
	}
	return frames, true, nil
}

// alignedBuf returns n bytes of *buf starting at a walAlign boundary in
// memory, as O_DIRECT requires, growing *buf when needed.
func alignedBuf(buf *[]byte, n int) []byte {
	for {
		b := *buf
		if cap(b) >= walAlign {
			b = b[:cap(b)]
			skip := int(-uintptr(unsafe.Pointer(&b[0])) & (walAlign - 1))
			if len(b)-skip >= n {
				return b[skip : skip+n]
			}
		}
		*buf = make([]byte, n+walAlign)
	}
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing store directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing store directory: %w", err)
	}
	return nil
}

// Frame payloads are a sequence of operations.
const (
	walSet = 'S'
	walDel = 'D'
)

type walOp struct {
	key, val []byte
	del      bool
	// ptr, for a record set, is where the log keeps val: what badger gets.
	ptr []byte
}

// isRecordSet reports whether op stores a record, whose bytes stay in the
// log while badger gets a pointer to them.
func (op *walOp) isRecordSet() bool { return !op.del && len(op.key) > 0 && op.key[0] == pRec }

func appendOp(b []byte, op walOp) []byte {
	if op.del {
		b = append(b, walDel)
		b = binary.AppendUvarint(b, uint64(len(op.key)))
		return append(b, op.key...)
	}
	b, _ = appendSet(b, op)
	return b
}

// appendSet appends a set and returns where in b its value starts.
func appendSet(b []byte, op walOp) ([]byte, int) {
	b = append(b, walSet)
	b = binary.AppendUvarint(b, uint64(len(op.key)))
	b = append(b, op.key...)
	b = binary.AppendUvarint(b, uint64(len(op.val)))
	return append(b, op.val...), len(b)
}

// decodeOps parses a frame's payload. With seg set, the payload starts at
// payOff in that log segment, and record sets get pointers to their values
// there.
func decodeOps(p []byte, seg uint32, payOff int64) ([]walOp, error) {
	var ops []walOp
	r := reader{b: p}
	for len(r.b) > 0 && r.err == nil {
		kind := r.b[0]
		r.b = r.b[1:]
		var op walOp
		op.key = r.bytes()
		switch kind {
		case walSet:
			op.val = r.bytes()
			if seg != 0 && r.err == nil && op.isRecordSet() {
				at := payOff + int64(len(p)-len(r.b)-len(op.val))
				op.ptr = ptrTo(seg, at, op.val).encode()
			}
		case walDel:
			op.del = true
		default:
			return nil, fmt.Errorf("unknown write-ahead log operation %q", kind)
		}
		ops = append(ops, op)
	}
	return ops, r.err
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}
