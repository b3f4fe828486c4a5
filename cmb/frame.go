package cmb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrameSize is MMP's cap on one frame's payload (§4.1).
const MaxFrameSize = 1 << 20

// Error codes of the MMP error frame (§7.2; 1006–1008 are v2's, used where v1 points at nothing).
const (
	CodeVersionMismatch    = 1001
	CodeDimensionMismatch  = 1002
	CodeFrameTooLarge      = 1003
	CodeHandshakeTimeout   = 1004
	CodeDuplicateNode      = 1005
	CodeAuthFailed         = 1006
	CodeGroupMismatch      = 1007 // v2 ROOM_MISMATCH; §14 A10
	CodeReplayDetected     = 1008
	CodeSVAFRejected       = 2001
	CodeFetchNotServed     = 2100 // cmbnode: a cmb-fetch this node will not serve
	CodeFetchRateLimited   = 2101 // cmbnode: too many fetches in flight
	codeConnectionLevelMin = 1000
	codeConnectionLevelMax = 1999
)

// IsConnectionLevel reports whether an error code closes the connection (1xxx).
func IsConnectionLevel(code int) bool {
	return code >= codeConnectionLevelMin && code <= codeConnectionLevelMax
}

// FrameError is a framing violation. The stream is done after one: send an
// error frame with Code, then close (§4.1).
type FrameError struct {
	Code   int
	Length uint32
	Msg    string
}

func (e *FrameError) Error() string { return e.Msg }

// ErrFrameSize is matched by errors.Is for every length-prefix violation.
var ErrFrameSize = errors.New("frame length out of range")

func (e *FrameError) Is(target error) bool { return target == ErrFrameSize }

// ReadFrame reads one length-prefixed frame. buf is reused when large enough.
// A zero or over-cap length is a *FrameError (code 1003) and nothing more is
// read, so a hostile prefix never makes us allocate. Partial reads are handled.
func ReadFrame(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err // io.EOF on a clean end between frames
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, &FrameError{Code: CodeFrameTooLarge, Length: n, Msg: "frame length is 0"}
	}
	if n > MaxFrameSize {
		return nil, &FrameError{Code: CodeFrameTooLarge, Length: n, Msg: fmt.Sprintf("frame length %d exceeds the %d-byte cap", n, MaxFrameSize)}
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %d-byte frame: %w", n, err)
	}
	return buf, nil
}

// AppendFrame appends the 4-byte big-endian length and the payload.
func AppendFrame(dst, payload []byte) ([]byte, error) {
	if len(payload) == 0 || len(payload) > MaxFrameSize {
		return dst, &FrameError{Code: CodeFrameTooLarge, Length: uint32(min(len(payload), 1<<32-1)), Msg: fmt.Sprintf("frame payload of %d bytes is outside 1..%d", len(payload), MaxFrameSize)}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...), nil
}

// WriteFrame writes one frame with a single Write call, so concurrent writers
// serialised by a mutex never interleave a header with another payload.
func WriteFrame(w io.Writer, payload []byte) error {
	b, err := AppendFrame(make([]byte, 0, 4+len(payload)), payload)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
