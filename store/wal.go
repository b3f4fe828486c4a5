package store

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// A log frame (seglog.go) carries one batch as a sequence of operations,
// encoded and decoded here, beside the helpers for durable writes.

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

// decodeOps parses a frame's payload, which starts at payOff in log
// segment seg; record sets get pointers to their values there.
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
			if r.err == nil && op.isRecordSet() {
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
