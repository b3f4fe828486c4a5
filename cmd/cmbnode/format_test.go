package main

import (
	"testing"
	"time"
)

func TestRelTime(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "just now"}, {-30 * time.Second, "just now"}, {42 * time.Second, "42s ago"},
		{3*time.Minute + 59*time.Second, "3m ago"}, {5 * time.Hour, "5h ago"}, {47 * time.Hour, "47h ago"},
		{3 * 24 * time.Hour, "3d ago"}, {40 * 24 * time.Hour, "2026-01-20"}, {-2 * time.Hour, "2026-03-01"},
	} {
		if got := relTime(now.Add(-c.ago), now); got != c.want {
			t.Errorf("relTime(-%v) = %q, want %q", c.ago, got, c.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly ten", 11, "exactly ten"},
		{"a line\nthat wraps\tand tabs", 100, "a line that wraps and tabs"},
		{"héllo wörld, long", 8, "héllo w…"},
		{"日本語のテキスト", 4, "日本語…"},
	} {
		if got := truncate(c.in, c.n); got != c.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
