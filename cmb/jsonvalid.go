package cmb

import "encoding/binary"

// ValidJSON reports whether data is one valid JSON value, exactly as
// json.Valid does (white space around it allowed, strings not checked
// for UTF-8, nesting up to json's limit), in one pass that steps over
// the bytes of a string in a tight loop: request lines and frames are
// mostly text, which json.Valid's byte-at-a-time state machine reads
// several times slower.
func ValidJSON(data []byte) bool { return validJSON(data, nil) }

// validJSON is ValidJSON noting in ends where objects and arrays end
// (ends may be nil).
func validJSON(data []byte, ends *valueEnds) bool {
	i, ok := validValue(data, skipSpace(data, 0), 0, ends)
	return ok && skipSpace(data, i) == len(data)
}

// valueEnds are where some of the objects and arrays of a valid document
// end, as its validation found them, so that reading the document does
// not scan them again to step over them: those nested two to
// maxEndsDepth deep (a cmb frame's record, its fields and each field), as
// many as fit. Each is known by the address of its first byte.
type valueEnds struct {
	n     int
	start [24]*byte
	size  [24]int
}

// maxEndsDepth is the deepest nesting valueEnds notes.
const maxEndsDepth = 4

func (t *valueEnds) add(b []byte, i, end, depth int) {
	if t != nil && depth >= 2 && depth <= maxEndsDepth && t.n < len(t.start) {
		t.start[t.n], t.size[t.n] = &b[i], end-i
		t.n++
	}
}

// end is the end of the object or array starting at b[i], if t noted it.
func (t *valueEnds) end(b []byte, i int) (int, bool) {
	if t == nil {
		return 0, false
	}
	p := &b[i]
	for k := range t.n {
		if t.start[k] == p && i+t.size[k] <= len(b) {
			return i + t.size[k], true
		}
	}
	return 0, false
}

// maxJSONDepth is encoding/json's nesting limit (its scanner's
// maxNestingDepth): json.Valid refuses a value nested deeper.
const maxJSONDepth = 10000

// validValue checks the value starting at b[i], at nesting depth (the
// objects and arrays around it), and returns its end.
func validValue(b []byte, i, depth int, ends *valueEnds) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return validString(b, i)
	case c == '{' || c == '[':
		if depth >= maxJSONDepth {
			return i, false
		}
		end, ok := validComposite(b, i, depth+1, ends)
		if ok {
			ends.add(b, i, end, depth+1)
		}
		return end, ok
	case c == '-' || (c >= '0' && c <= '9'):
		return validNumber(b, i)
	case c == 't':
		return validLiteral(b, i, "true")
	case c == 'f':
		return validLiteral(b, i, "false")
	case c == 'n':
		return validLiteral(b, i, "null")
	}
	return i, false
}

// validComposite checks the object or array starting at b[i].
func validComposite(b []byte, i, depth int, ends *valueEnds) (int, bool) {
	obj := b[i] == '{'
	end := byte(']')
	if obj {
		end = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == end {
		return i + 1, true
	}
	for {
		var ok bool
		if obj {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			if i, ok = validString(b, i); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			i = skipSpace(b, i+1)
		}
		if i, ok = validValue(b, i, depth, ends); !ok {
			return i, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case end:
			return i + 1, true
		default:
			return i, false
		}
	}
}

// validString checks the string starting at b[i] (its quote): no control
// character, and only JSON's escapes. Eight bytes are stepped over at a
// time while none needs a look (plainWord); a word that does is read byte
// by byte, and only then is the next word tried, so a string dense with
// escapes costs one word test per eight bytes, not one per byte.
func validString(b []byte, i int) (int, bool) {
	for i++; i < len(b); {
		if i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
			continue
		}
		for end := min(i+8, len(b)); i < end; i++ {
			c := b[i]
			if c >= 0x20 && c != '"' && c != '\\' {
				continue
			}
			switch c {
			case '"':
				return i + 1, true
			case '\\':
				i++
				if i >= len(b) {
					return i, false
				}
				switch b[i] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				case 'u':
					if i+4 >= len(b) {
						return i, false
					}
					for _, h := range b[i+1 : i+5] {
						if !isHex(h) {
							return i, false
						}
					}
					i += 4
				default:
					return i, false
				}
			default: // a control character
				return i, false
			}
		}
	}
	return i, false
}

// validNumber checks the number starting at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func validLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// plainWord reports that none of the eight bytes of x is a quote, a
// backslash or a control character: the bytes validString steps over.
// (A SWAR test: (v - 0x01…01*n) &^ v & 0x80…80 is non-zero exactly when
// a byte of v is below n ≤ 0x80, and a byte of v is c when the byte of
// v ^ 0x01…01*c is below 1.)
func plainWord(x uint64) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(ones*'"'), x^(ones*'\\')
	return ((x-0x20*ones)&^x|(q-ones)&^q|(bs-ones)&^bs)&high == 0
}
