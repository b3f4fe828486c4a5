package cmb

import (
	"strings"
	"unicode/utf8"
)

// Canonical is Encode's bytes. A record that a frame carried in exactly
// those bytes (ParseFrame) keeps a copy of them and returns it, without
// encoding the record again; the bytes are then shared with the record
// and must not be modified. A record is immutable once decoded: Sign and
// SetGroup, which change one, drop the copy, and a Clone has none.
func (r *Record) Canonical() []byte {
	if r.enc != nil {
		return r.enc
	}
	return r.Encode()
}

// encodes reports whether data, valid JSON, is byte for byte
// r.AppendJSON(nil). It
// walks r in AppendJSON's order and compares each piece with data instead
// of encoding r: a text, the bulk of a record, is compared in place when
// appendString writes it as it is, and the small pieces around the texts
// are encoded into a buffer on the stack.
func (r *Record) encodes(data []byte) bool {
	var buf [256]byte
	d, ok := cutPrefix(data, r.appendHead(buf[:0]))
	if ok {
		d, ok = cutPrefix(d, `,"fields":`)
	}
	switch {
	case !ok:
	case r.Sealed != "":
		d, ok = cutString(d, r.Sealed)
	default:
		d, ok = cutPrefix(d, "{")
		for i := 0; ok && i < NumFields; i++ {
			if d, ok = cutPrefix(d, appendFieldHead(buf[:0], i)); ok {
				if d, ok = cutString(d, r.Fields[i].Text); ok {
					d, ok = cutPrefix(d, r.Fields[i].appendTail(buf[:0]))
				}
			}
		}
		if ok {
			d, ok = cutPrefix(d, appendFieldsTail(buf[:0], r.FieldsExtra))
		}
	}
	return ok && string(d) == string(r.appendTail(buf[:0]))
}

// cutPrefix is d after p, if d begins with p.
func cutPrefix[T string | []byte](d []byte, p T) ([]byte, bool) {
	if len(d) < len(p) || string(d[:len(p)]) != string(p) {
		return d, false
	}
	return d[len(p):], true
}

// cutString is d after appendString's encoding of s, if d begins with it.
// A string appendString writes as it is (plainString) is compared in
// place: d is the rest of valid JSON, so s found there between quotes
// holds no control character either. Any other is encoded and compared.
func cutString(d []byte, s string) ([]byte, bool) {
	if n := len(s) + 2; len(d) >= n && d[0] == '"' && d[n-1] == '"' && string(d[1:n-1]) == s && plainString(s) {
		return d[n:], true
	}
	var buf [512]byte
	return cutPrefix(d, appendString(buf[:0], s))
}

// plainString reports whether appendString writes s, a string without
// control characters, as it is between its quotes: s has no quote or
// backslash, no invalid UTF-8 and no U+2028 or U+2029. Each is one fast
// scan, not a loop over its bytes.
func plainString(s string) bool {
	if strings.IndexByte(s, '\\') >= 0 || strings.IndexByte(s, '"') >= 0 || !utf8.ValidString(s) {
		return false
	}
	// U+2028 and U+2029 are E2 80 A8 and E2 80 A9.
	return strings.IndexByte(s, 0xE2) < 0 || !(strings.Contains(s, "\u2028") || strings.Contains(s, "\u2029"))
}
