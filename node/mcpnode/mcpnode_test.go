package mcpnode

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
