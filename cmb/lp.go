package cmb

import "strconv"

// AppendLP appends the netstring-style length prefix used by every MMP byte
// construction: decimal(len(s)) ":" s, with no trailing comma (spec/mmp.md §6.3).
// Callers pass text already in the form the construction names (NFC where the
// spec says NFC); AppendLP itself never normalises.
func AppendLP(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// AppendLPBytes is AppendLP for a byte slice.
func AppendLPBytes(dst, b []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, ':')
	return append(dst, b...)
}
