package ipc

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"
)

// marshalsPlain reports whether json.Marshal writes s as its bytes in
// quotes: what plainJSON must report.
func marshalsPlain(s string) bool {
	q, err := json.Marshal(s)
	return err == nil && string(q) == `"`+s+`"`
}

// TestPlainJSONIsMarshalsPlain holds plainJSON's word-at-a-time test equal
// to json.Marshal's own verdict: every byte at every offset of two words
// and the tail, every pair of bytes alone and straddling two words, then
// random strings of all lengths mixing plain text, the bytes json.Marshal
// escapes, multi-byte runes, the line separators and invalid UTF-8.
func TestPlainJSONIsMarshalsPlain(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := plainJSON(s), marshalsPlain(s); got != want {
			t.Fatalf("plainJSON(%q) = %v, json.Marshal writes it plain: %v", s, got, want)
		}
	}
	pad := "abcdefghijklmnop"
	for c := range 256 {
		for at := range 17 {
			check(pad[:at] + string([]byte{byte(c)}) + pad[at:])
		}
	}
	for c := range 256 {
		for d := range 256 {
			s := string([]byte{byte(c), byte(d)})
			check(s)
			check("0123456" + s + "789abcdefg")
		}
	}
	pieces := []string{"a", "kalo ", "mirento", " ", "~", "\x7f", "\"", `\`, "<", ">", "&", "\n", "\t", "\x00", "\x1f",
		"é", "☕", "𝄞", "\u2028", "\u2029", "\u2027", "\u202a", "\xe2\x80", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80"}
	r := rand.New(rand.NewSource(1))
	for range 200000 {
		var b strings.Builder
		for range r.Intn(40) {
			p := pieces[r.Intn(len(pieces))]
			if r.Intn(4) > 0 {
				p = pieces[r.Intn(4)] // mostly plain text
			}
			b.WriteString(p)
		}
		check(b.String())
	}
}

// oldPlainJSON is plainJSON as it was, a byte at a time over printable
// ASCII: on ASCII the word-at-a-time test must agree with it.
func oldPlainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x80, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func TestPlainJSONAgreesOnASCII(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for range 200000 {
		b := make([]byte, r.Intn(50))
		for i := range b {
			b[i] = byte('a' + r.Intn(26))
			if r.Intn(30) == 0 {
				b[i] = byte(r.Intn(0x80))
			}
		}
		if s := string(b); plainJSON(s) != oldPlainJSON(s) {
			t.Fatalf("plainJSON(%q) = %v, the byte loop says %v", s, plainJSON(s), oldPlainJSON(s))
		}
	}
}

func BenchmarkPlainJSON(b *testing.B) {
	s := strings.Repeat("kalo mirento ", 300/13+1)[:300]
	for b.Loop() {
		if !plainJSON(s) {
			b.Fatal("not plain")
		}
	}
}
