package ipc

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestInvalidUTF8IsRefused: a request whose text is not valid UTF-8 (raw
// bytes, or an escaped lone surrogate), or holds a NUL, is refused with
// bad_request naming the member; the reply itself is always valid UTF-8
// and JSON; nothing is stored. Before the fix the id was echoed raw and
// field text was stored with U+FFFD or NUL in it.
func TestInvalidUTF8IsRefused(t *testing.T) {
	ts := startServer(t, nil)
	r := dialRaw(t, ts.path)
	cases := []struct{ msg, member string }{
		{"{\"type\":\"status\",\"id\":\"a\xffb\"}", "id"},
		{"{\"type\":\"remember\",\"id\":1,\"fields\":{\"focus\":\"caf\xc3\"}}", "fields.focus"},
		{"{\"type\":\"remember\",\"id\":2,\"fields\":{\"focus\":{\"text\":\"x\\ud800y\"}}}", "fields.focus.text"},
		{"{\"type\":\"remember\",\"id\":3,\"fields\":{\"focus\":\"nul\\u0000here\"}}", "fields.focus"},
		{"{\"type\":\"remember\",\"id\":4,\"categories\":{\"mood\":\"ok\"},\"parents\":[\"cmb1-\xfe\"]}", "parents[0]"},
		{"{\"type\":\"rem\xffember\",\"id\":5}", "type"},
		{"{\"type\":\"recall\",\"id\":6,\"query\":\"\xed\xa0\x80\"}", "query"},
	}
	for _, c := range cases {
		r.send(c.msg)
		r.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := r.br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("%q: read: %v", c.msg, err)
		}
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Errorf("%q: reply is not valid UTF-8 JSON: %q", c.msg, line)
			continue
		}
		var m map[string]any
		json.Unmarshal(line, &m)
		if m["type"] != "error" || m["code"] != CodeBadRequest {
			t.Errorf("%q: want bad_request, got %s", c.msg, line)
			continue
		}
		if msg, _ := m["message"].(string); !strings.Contains(msg, c.member) || !strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "NUL") {
			t.Errorf("%q: message does not name %s: %q", c.msg, c.member, msg)
		}
	}
	if n := ts.node.Count(); n != 0 {
		t.Fatalf("%d records stored from invalid text", n)
	}
	// Valid multi-byte text and a control character in a type still make
	// valid replies.
	r.send(`{"type":"remember","id":"ok","fields":{"focus":"café ✓ 𝄞"}}`)
	wantResult(t, r.recv(), "remember")
	r.send("{\"type\":\"fr\\u0007ob\",\"id\":7}")
	line, err := r.br.ReadBytes('\n')
	if err != nil || !json.Valid(line) {
		t.Fatalf("unknown type with a control character: reply %q is not JSON (%v)", line, err)
	}
}

// TestBadStringFindsEveryEscape: badString's verdict on escapes wherever
// they stand (first, last, after other escapes, after an escaped
// backslash, which makes the "\u" that follows plain text).
func TestBadStringFindsEveryEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`"plain text"`, ""},
		{`"\u0000"`, "holds a NUL (\\u0000)"},
		{`"a\nb\"c\u0000"`, "holds a NUL (\\u0000)"},
		{`"\\u0000"`, ""},
		{`"\\\u0000"`, "holds a NUL (\\u0000)"},
		{`"x\ud83d\ude42y"`, ""},
		{`"x\ud83dy"`, "is not valid UTF-8 (an unpaired surrogate escape)"},
		{`"x\ude42"`, "is not valid UTF-8 (an unpaired surrogate escape)"},
		{`"\ud83d\ude42\ud800"`, "is not valid UTF-8 (an unpaired surrogate escape)"},
		{`"\u00e9\t\u20ac"`, ""},
		{`"ends with \`, ""},
		{`"\u12"`, ""},
		{"\"raw \x00 nul\"", "holds a NUL"},
		{"\"caf\xc3\"", "is not valid UTF-8"},
		{strings.Repeat(`word \" `, 100) + `\u0000`, "holds a NUL (\\u0000)"},
	} {
		if got := badString([]byte(c.in)); got != c.want {
			t.Errorf("badString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
