package mcpnode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-05-01T09:00:00Z": time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC),
		"2026-05-01":           time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC),
		"36h":                  now.Add(-36 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"2w":                   now.Add(-14 * 24 * time.Hour),
		"1.5d":                 now.Add(-36 * time.Hour),
	} {
		got, err := parseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-3d", "-1h", "2026-13-01"} {
		if _, err := parseTime(bad, now); err == nil {
			t.Errorf("parseTime(%q) accepted", bad)
		}
	}
}

func TestPeekID(t *testing.T) {
	for in, want := range map[string]any{
		`{"jsonrpc":"2.0","id":7,"method":"x"}`:      int64(7),
		`{"jsonrpc":"2.0","id":"a","params":{"x":`:   "a",
		`{"params":{"id":3},"id":4`:                  int64(4),
		`{"jsonrpc":"2.0","method":"x"}`:             nil,
		`{"jsonrpc":"2.0","params":{"x":"` + "trunc": nil,
		`[1]`:                 nil,
		`{"id":{"nested":1}}`: nil,
	} {
		if got := peekID([]byte(in)).Raw(); got != want {
			t.Errorf("peekID(%s) = %v (%T), want %v", in, got, got, want)
		}
	}
}

// A line over the limit is consumed whole, so the next line reads cleanly.
func TestReadLineOverLimit(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 300)+"\nnext\n"), 16)
	line, over, err := readLine(br, nil, 100)
	if !over || err != nil || len(line) > 4096 {
		t.Fatalf("long line: over %v err %v len %d", over, err, len(line))
	}
	line, over, err = readLine(br, nil, 100)
	if over || err != nil || string(line) != "next" {
		t.Fatalf("next line: %q over %v err %v", line, over, err)
	}
}

// An error response whose request id could not be read carries "id":null.
func TestEncodeNullID(t *testing.T) {
	b, err := encode(&jsonrpc.Response{Error: &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "bad"}})
	if err != nil || !strings.HasPrefix(string(b), `{"jsonrpc":"2.0","id":null,`) {
		t.Fatalf("encode: %s %v", b, err)
	}
}

func TestPlural(t *testing.T) {
	if got := plural(1, "memory") + ", " + plural(2, "memory") + ", " + plural(0, "peer"); got != "1 memory, 2 memories, 0 peers" {
		t.Fatal(got)
	}
}

// TestEncodeResult: the fast path for a successful response writes what
// jsonrpc.EncodeMessage writes, and leaves every other message to it.
func TestEncodeResult(t *testing.T) {
	var results []json.RawMessage
	for _, v := range []any{
		map[string]any{},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a <b> & \"c\"\t· é \u2028 \x01\n"}},
			StructuredContent: json.RawMessage(`{"query":"<x>","results":[{"score":1.5,"text":"é"}]}`)},
		[]int{1, 2, 3},
		"a string",
	} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // as the SDK marshals results
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		results = append(results, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	for _, raw := range []any{0.0, 7.0, -3.0, float64(1 << 53), "a", "", "<&>", "é\u2028\"\\"} {
		id, err := jsonrpc.MakeID(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range results {
			m := &jsonrpc.Response{ID: id, Result: res}
			want, err := jsonrpc.EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := encodeResult(m)
			if !ok || !bytes.Equal(got, want) {
				t.Errorf("id %#v result %s:\n got %s (%v)\nwant %s", raw, res, got, ok, want)
			}
		}
	}
	for _, m := range []jsonrpc.Message{
		&jsonrpc.Response{ID: jsonrpc.ID{}, Error: &jsonrpc.Error{Code: 1, Message: "x"}},
		&jsonrpc.Response{ID: mustID(t, 1.0), Error: &jsonrpc.Error{Code: 1, Message: "x"}},
		&jsonrpc.Response{ID: mustID(t, 1.0), Result: json.RawMessage("{\n}")},
		&jsonrpc.Response{ID: mustID(t, 1.0)},
		&jsonrpc.Request{ID: mustID(t, 1.0), Method: "ping"},
	} {
		if b, ok := encodeResult(m); ok {
			t.Errorf("%#v took the fast path: %s", m, b)
		}
	}
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOneLine holds oneLine's fast path to what folding does.
func TestOneLine(t *testing.T) {
	ref := func(s string, n int) string {
		s = strings.Join(strings.Fields(s), " ")
		if r := []rune(s); len(r) > n {
			return string(r[:n]) + "…"
		}
		return s
	}
	for _, s := range []string{"", " ", "a", "a b", "a  b", " a", "a ", "a\tb", "a\nb", "a\u00a0b", "a\u0085b",
		"a\u2028b", "a\u3000b", "é ü", "\xff \xfe", "a \xff", "abcdef", "abc def", "abcdé", "ab cdé"} {
		for _, n := range []int{3, 5, 400} {
			if got, want := oneLine(s, n), ref(s, n); got != want {
				t.Errorf("oneLine(%q, %d) = %q, want %q", s, n, got, want)
			}
		}
	}
}

// TestWriteMemoryHead: the head line reads as it did when fmt wrote it.
func TestWriteMemoryHead(t *testing.T) {
	for _, score := range []float64{0, 12.614528250852338, -0.0004, 1e21, math.Inf(1), math.NaN()} {
		m := Memory{Key: "cmb1-ab", Author: "01a2319f-e9c4-752a-8129-3a317cb29579", Time: "2026-10-05T20:45:42Z", Score: &score}
		var b strings.Builder
		writeMemory(&b, "  ", &m)
		want := fmt.Sprintf("%s · %s · %s · score %.3f\n", m.Key, cmb.Truncate(m.Author, 13), m.Time, score)
		if b.String() != want {
			t.Errorf("score %v: %q, want %q", score, b.String(), want)
		}
	}
}

// A result given while the daemon syncs leads with a note saying so; none
// otherwise.
func TestSyncNote(t *testing.T) {
	if got := syncNote(nil); got != "" {
		t.Errorf("a note when not syncing: %q", got)
	}
	got := syncNote(&Syncing{Received: 8798, Expected: 25000, Peers: 1})
	if want := "Note: still catching up with 1 peer (8798 of about 25000 memories received); results may be incomplete.\n"; got != want {
		t.Errorf("syncNote = %q, want %q", got, want)
	}
}

// TestWriteMemoryFields: the field lines read as they did when fmt wrote
// the mood's numbers, and the parents follow.
func TestWriteMemoryFields(t *testing.T) {
	for _, v := range []float64{0, 0.5, -0.25, -0.001, 0.004, 1, -1, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN()} {
		for _, both := range []bool{false, true} {
			m := Memory{Key: "cmb1-ab", Author: "n", Time: "t", Parents: []string{"cmb1-p1", "cmb1-p2"}}
			m.Fields.Focus.Text = "the  plan\n"
			m.Fields.Issue.Text = cmb.Neutral
			m.Fields.Mood = node.FieldJSON{Text: "calm", Valence: &v}
			want := "  mood: calm (valence " + fmt.Sprintf("%+.2f", v) + ")\n"
			if both {
				a := -v
				m.Fields.Mood.Arousal = &a
				want = fmt.Sprintf("  mood: calm (valence %+.2f, arousal %+.2f)\n", v, a)
			}
			var b strings.Builder
			writeMemory(&b, "  ", &m)
			_, body, _ := strings.Cut(b.String(), "\n")
			if want = "  focus: the plan\n" + want + "  builds on: cmb1-p1, cmb1-p2\n"; body != want {
				t.Errorf("valence %v: %q, want %q", v, body, want)
			}
		}
	}
}
