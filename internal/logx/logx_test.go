package logx

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// componentCounts counts the "component" keys of each JSON line (a map
// would keep only the last of a repeated key).
func componentCounts(t *testing.T, out string) []int {
	t.Helper()
	var counts []int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		counts = append(counts, strings.Count(l, `"`+ComponentKey+`":`))
	}
	return counts
}

func TestNestedComponentLoggerWritesOneKey(t *testing.T) {
	var buf bytes.Buffer
	root := slog.New(OneComponent(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	mesh := root.With(ComponentKey, "mesh", "peer", "p1")
	pubsub := mesh.With(ComponentKey, "pubsub")
	pubsub.Warn("flood")
	mesh.Info("own line")
	root.With(ComponentKey, "store").Error("badger says", ComponentKey, "badger")
	root.Info("root line")

	got := componentCounts(t, buf.String())
	if want := []int{1, 1, 1, 0}; len(got) != len(want) || got[0] != 1 || got[1] != 1 || got[2] != 1 || got[3] != 0 {
		t.Fatalf("component keys per line = %v, want %v:\n%s", got, want, buf.String())
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	for i, want := range []string{"pubsub", "mesh", "badger"} {
		if lines[i][ComponentKey] != want {
			t.Errorf("line %d: component %v, want %s", i, lines[i][ComponentKey], want)
		}
	}
	if lines[0]["peer"] != "p1" {
		t.Errorf("the outer logger's other attributes were lost: %v", lines[0])
	}

	// The text handler too, and attributes inside a group are left alone.
	buf.Reset()
	text := slog.New(OneComponent(slog.NewTextHandler(&buf, nil)))
	text.With(ComponentKey, "mesh").With(ComponentKey, "pubsub").WithGroup("g").With(ComponentKey, "inner").Info("x")
	if s := buf.String(); strings.Count(s, " component=") != 1 || !strings.Contains(s, "component=pubsub") || !strings.Contains(s, "g.component=inner") {
		t.Fatalf("text line: %s", s)
	}
}

func TestQuietDemotesAndRateLimitsAFlood(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	const noisy = "error bumping delivery tag"
	opts := QuietOptions{Demote: []string{noisy}, Burst: 5, Window: time.Minute, Now: clock}

	// At INFO, the daemon's default, the demoted flood writes nothing.
	var buf bytes.Buffer
	q := Quiet(slog.NewJSONHandler(&buf, nil), opts)
	l := slog.New(q).With(ComponentKey, "pubsub")
	for range 5000 {
		l.Warn(noisy, "err", errors.New("queue full"))
	}
	if buf.Len() != 0 {
		t.Fatalf("a demoted flood reached an INFO log:\n%.500s", buf.String())
	}
	if q.Demoted() != 5000 {
		t.Fatalf("demoted %d, want 5000", q.Demoted())
	}

	// At DEBUG, only a burst per window is written; the rest is counted,
	// and the next line written says how many were held back.
	buf.Reset()
	q = Quiet(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), opts)
	l = slog.New(q)
	for range 5000 {
		l.Warn(noisy, "err", "queue full")
	}
	if n := strings.Count(buf.String(), "\n"); n != 5 {
		t.Fatalf("%d lines of a 5000-line flood written, want 5", n)
	}
	if !strings.Contains(buf.String(), `"level":"DEBUG"`) || strings.Contains(buf.String(), `"level":"WARN"`) {
		t.Fatalf("flood not demoted to DEBUG:\n%s", buf.String())
	}
	if q.Suppressed() != 4995 {
		t.Fatalf("suppressed %d, want 4995", q.Suppressed())
	}
	now = now.Add(time.Minute)
	buf.Reset()
	l.Warn(noisy, "err", "queue full")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["suppressed"] != float64(4995) {
		t.Fatalf("first line of the next window: %s (%v)", buf.String(), err)
	}

	// A message not demoted keeps its level but is rate-limited too, and
	// other messages are not held back by its flood.
	buf.Reset()
	for range 100 {
		l.Warn("some other warning")
	}
	l.Error("a real error")
	out := buf.String()
	if strings.Count(out, "some other warning") != 5 || !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, "a real error") {
		t.Fatalf("rate limit of other messages:\n%s", out)
	}
}
