package cmb

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
	"unsafe"
)

// Reading JSON that is known to be valid: a record or frame is checked
// once (json.Valid) where it enters, and then taken apart member by
// member without being scanned and validated again at every depth, as
// json.Unmarshal into a map of raw members would. The results are those
// of json.Unmarshal: member names unescaped, the last of repeated names
// winning, each value's bytes without the white space around it.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value starting at b[i],
// from ends when it knows it (ends may be nil).
func skipValue(b []byte, i int, ends *valueEnds) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		if end, ok := ends.end(b, i); ok {
			return end
		}
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default: // a number or a literal
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && !isSpace(b[i]) {
			i++
		}
		return i
	}
}

// skipString returns the end of the string starting at b[i] (its quote):
// the first quote after it that an even run of backslashes precedes (an
// escape's backslash is never part of a longer run; inside a string \\ is
// one escape), found by bytes.IndexByte rather than byte by byte.
func skipString(b []byte, i int) int {
	for start := i + 1; ; {
		j := bytes.IndexByte(b[start:], '"')
		if j < 0 {
			return len(b)
		}
		q := start + j
		n := 0
		for p := q - 1; p >= start && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		start = q + 1
	}
}

// objectMembers is the members of the valid JSON object raw, as
// json.Unmarshal into a map[string]json.RawMessage gives them.
func objectMembers(raw []byte) map[string]json.RawMessage {
	obj := make(map[string]json.RawMessage, 8)
	eachMember(raw, func(name string, v []byte) { obj[name] = v })
	return obj
}

// ObjectMembers is the members of raw, a JSON object json.Valid accepts, as
// json.Unmarshal into a map[string]json.RawMessage gives them, without
// scanning raw a second time: each value is a slice of raw, not a copy.
func ObjectMembers(raw []byte) map[string]json.RawMessage { return objectMembers(trimJSON(raw)) }

// member is one member of a valid JSON object: its name decoded, its
// value a slice of the object.
type member struct {
	name string
	v    []byte
}

// indexedMembers is how many members an object may have before
// appendObjectMembers finds repeated names through a map rather than by
// comparing each name with all before it, which would be quadratic in a
// frame of thousands of tiny members.
const indexedMembers = 16

// appendObjectMembers appends to ms the members of the valid JSON object raw,
// each name once, in the order names first appear, with the value of the
// last member of that name, as json.Unmarshal into a map keeps it.
// Decoders pass a small array of their stack as ms: a record's objects
// are taken apart without allocating.
func appendObjectMembers(ms []member, raw []byte) []member {
	return appendObjectMembersEnds(ms, raw, nil)
}

// appendObjectMembersEnds is appendObjectMembers stepping over the values
// ends knows without scanning them.
func appendObjectMembersEnds(ms []member, raw []byte, ends *valueEnds) []member {
	base := len(ms)
	var index map[string]int
	eachMemberEnds(raw, ends, func(name string, v []byte) {
		if index != nil {
			if j, ok := index[name]; ok {
				ms[j].v = v
				return
			}
			index[name] = len(ms)
		} else {
			for j := base; j < len(ms); j++ {
				if ms[j].name == name {
					ms[j].v = v
					return
				}
			}
			if len(ms)-base == indexedMembers {
				index = make(map[string]int, 2*indexedMembers)
				for j := base; j < len(ms); j++ {
					index[ms[j].name] = j
				}
				index[name] = len(ms)
			}
		}
		ms = append(ms, member{name, v})
	})
	return ms
}

// lookup is the value of the member named name, if ms has it.
func lookup(ms []member, name string) ([]byte, bool) {
	for _, m := range ms {
		if m.name == name {
			return m.v, true
		}
	}
	return nil, false
}

// eachMember calls fn with each member of the valid JSON object raw, in
// order.
func eachMember(raw []byte, fn func(name string, v []byte)) { eachMemberEnds(raw, nil, fn) }

// eachMemberEnds is eachMember stepping over the values ends knows
// without scanning them.
func eachMemberEnds(raw []byte, ends *valueEnds, fn func(name string, v []byte)) {
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] == '"' {
		end := skipString(raw, i)
		name := memberName(raw[i:end])
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // the colon
		vend := skipValue(raw, i, ends)
		fn(name, raw[i:vend:vend])
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
}

// StringValue is raw, a valid JSON value (a member ObjectMembers gave),
// decoded as json.Unmarshal into a string decodes it, if it is a string;
// ok is false for any other value. A string without escapes, valid UTF-8,
// costs a copy and no reflection.
func StringValue(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	return unquote(raw), true
}

// memberName is the member name q (a valid JSON string) decoded: one of
// the names records, their fields, frames and socket requests use is
// that name's constant, so decoding a record does not allocate its two
// dozen member names again; any other name is unquoted. (A switch, which
// the compiler makes a search by length and bytes: cheaper than hashing
// every name for a map.)
func memberName(q []byte) string {
	switch string(q[1 : len(q)-1]) {
	case "focus":
		return "focus"
	case "issue":
		return "issue"
	case "intent":
		return "intent"
	case "motivation":
		return "motivation"
	case "commitment":
		return "commitment"
	case "perspective":
		return "perspective"
	case "mood":
		return "mood"
	case "key":
		return "key"
	case "createdBy":
		return "createdBy"
	case "createdAt":
		return "createdAt"
	case "group":
		return "group"
	case "to":
		return "to"
	case "fields":
		return "fields"
	case "lineage":
		return "lineage"
	case "parents":
		return "parents"
	case "ancestors":
		return "ancestors"
	case "method":
		return "method"
	case "sig":
		return "sig"
	case "sigAlg":
		return "sigAlg"
	case "tether":
		return "tether"
	case "_e2e":
		return "_e2e"
	case "text":
		return "text"
	case "vector":
		return "vector"
	case "valence":
		return "valence"
	case "arousal":
		return "arousal"
	case "type":
		return "type"
	case "id":
		return "id"
	case "cmb":
		return "cmb"
	case "timestamp":
		return "timestamp"
	case "publicKey":
		return "publicKey"
	case "e2ePublicKey":
		return "e2ePublicKey"
	case "directed":
		return "directed"
	case "nodeId":
		return "nodeId"
	case "name":
		return "name"
	case "version":
		return "version"
	}
	return unquote(q)
}

// unquote is the valid JSON string q decoded as json.Unmarshal decodes it.
// Most strings have no escape and are valid UTF-8: their bytes are the text.
func unquote(q []byte) string {
	body := q[1 : len(q)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body)
	}
	var s string
	json.Unmarshal(q, &s)
	return s
}

// textCopy is a copy of a document's bytes, src, that strings decoded
// from src share instead of each being copied: a string whose JSON has
// no escape and is valid UTF-8 is its own bytes, which are the same at
// the same place in copy. Nothing writes to copy once it is made (the
// strings would change), and the strings keep all of it alive, so it is
// used only where copy is kept as long as they are (a record's enc).
type textCopy struct{ src, copy []byte }

// unquote is unquote of q, a string of t.src, as a string sharing t.copy
// where it can (t nil: never).
func (t *textCopy) unquote(q []byte) string {
	body := q[1 : len(q)-1]
	if t == nil || len(body) == 0 || bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return unquote(q)
	}
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(body))) - uintptr(unsafe.Pointer(unsafe.SliceData(t.src))))
	if off < 0 || off > len(t.src)-len(body) || len(t.copy) != len(t.src) {
		return unquote(q) // not in src
	}
	return unsafe.String(&t.copy[off], len(body))
}

// trimJSON is raw without the white space around it.
func trimJSON(raw []byte) []byte {
	i, j := 0, len(raw)
	for i < j && isSpace(raw[i]) {
		i++
	}
	for j > i && isSpace(raw[j-1]) {
		j--
	}
	return raw[i:j]
}
