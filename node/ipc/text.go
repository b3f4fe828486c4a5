package ipc

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// badText finds the first string in a request that is not text the daemon
// can keep exactly: bytes that are not UTF-8, an escaped UTF-16 surrogate
// without its pair (both of which encoding/json would turn into U+FFFD, so
// the record signed would not be the text the agent sent), or a NUL. It
// returns the member's path ("fields.focus.text", "parents[0]") and what is
// wrong, or "" when every string (member names included) is clean. m is
// the request as decoded; raw values are checked, never decoded ones.
func badText(m message) (member, problem string) {
	for _, k := range sortedKeys(m) {
		if p, what := badTextIn(m[k], k); p != "" {
			return p, what
		}
	}
	return "", ""
}

// badTextRaw is badText for msg, the request's raw JSON text, decoded as
// m: when msg holds no bad text anywhere, no member does, and the walk
// that names the bad member (it decodes every nested object again) is
// spared. An escape cannot straddle what the walk looks at: backslashes
// occur only inside strings, which members begin and end outside of.
func badTextRaw(msg []byte, m message) (member, problem string) {
	if badString(msg) == "" {
		return "", ""
	}
	return badText(m)
}

func badTextIn(raw json.RawMessage, path string) (string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", ""
	}
	switch raw[0] {
	case '"':
		if what := badString(raw); what != "" {
			return path, what
		}
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return "", ""
		}
		// A member name is decoded (and so repaired) as a map key: check
		// the object's raw bytes for names that are not clean.
		for _, k := range sortedKeys(obj) {
			if p, what := badTextIn(obj[k], path+"."+k); p != "" {
				return p, what
			}
		}
		if what := badString(raw); what != "" {
			return path, what + " in a member name"
		}
	case '[':
		var arr []json.RawMessage
		if json.Unmarshal(raw, &arr) != nil {
			return "", ""
		}
		for i, v := range arr {
			if p, what := badTextIn(v, path+"["+strconv.Itoa(i)+"]"); p != "" {
				return p, what
			}
		}
	}
	return "", ""
}

// badString checks JSON text (one string literal, or an object's bytes)
// for raw bytes that are not UTF-8, escaped lone surrogates and NULs.
func badString(b []byte) string {
	if !utf8.Valid(b) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(b); i++ {
		// Only escapes matter: jump to the next backslash.
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			break
		}
		if i += j; i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // \" \\ \n …: skip the escaped byte
			continue
		}
		r, ok := hex4(b, i+2)
		if !ok {
			continue
		}
		switch {
		case r == 0:
			return "holds a NUL (\\u0000)"
		case r >= 0xD800 && r < 0xDC00:
			lo, ok := rune(0), false
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				lo, ok = hex4(b, i+8)
			}
			if !ok || lo < 0xDC00 || lo >= 0xE000 {
				return "is not valid UTF-8 (an unpaired surrogate escape)"
			}
			i += 11
		case r >= 0xDC00 && r < 0xE000:
			return "is not valid UTF-8 (an unpaired surrogate escape)"
		default:
			i += 5
		}
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return "holds a NUL"
	}
	return ""
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(n), err == nil
}

// sortedKeys orders the members so that, of several bad ones, the same is
// named every time.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// badTextError words badText's finding for the agent.
func badTextError(member, problem string) *Error {
	return Errorf(CodeBadRequest, "%s %s; send text as UTF-8 without NUL", member, problem)
}

// appendJSONString appends s as a JSON string literal; invalid UTF-8
// becomes U+FFFD, so output is always valid UTF-8 (strconv.Quote would
// write Go escapes such as \x80 or \a, which are not JSON).
func appendJSONString(b []byte, s string) []byte {
	if plainJSON(s) {
		// What json.Marshal writes for it: the bytes between quotes.
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// plainJSON reports whether json.Marshal writes s unescaped: valid UTF-8
// without control characters, the quote, the backslash, the HTML
// characters it escapes (<, >, &) or U+2028 and U+2029, which it escapes
// too. Keys, actions and codes always are, and so is most field text: an
// event carries about 2 KB of it.
//
// The ASCII bytes are checked eight at a time, as a word: for a byte
// value n ≤ 0x80, (v - 0x01…01*n) &^ v & 0x80…80 is non-zero exactly
// when some byte of v is below n (a borrow only starts at such a byte),
// and a byte of v is 0 exactly when it is below 1. A byte of x is '\\'
// when that byte of x ^ 0x01…01*'\\' is 0; it is '<' or '>' (0x3c,
// 0x3e) when that byte of x | 0x02…02 is '>', and '"' or '&' (0x22,
// 0x26) when that byte of x | 0x04…04 is '&'. Bytes from 0x80 up pass
// that test; they are checked as UTF-8, and for the two separators, only
// if there are any.
func plainJSON(s string) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	var seen uint64 // every byte seen, ORed together
	rest := s
	for len(rest) >= 8 {
		x := le64(rest)
		bs := x ^ (ones * '\\')
		angle := (x | ones*0x02) ^ (ones * '>')
		qamp := (x | ones*0x04) ^ (ones * '&')
		if ((x-0x20*ones)&^x|(bs-ones)&^bs|(angle-ones)&^angle|(qamp-ones)&^qamp)&high != 0 {
			return false
		}
		seen |= x
		rest = rest[8:]
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
		seen |= uint64(c)
	}
	if seen&high == 0 {
		return true // all ASCII
	}
	return utf8.ValidString(s) && !strings.Contains(s, "\u2028") && !strings.Contains(s, "\u2029")
}

// le64 is the first eight bytes of s as a little-endian word (one load:
// the compiler merges the byte loads).
func le64(s string) uint64 {
	s = s[:8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
