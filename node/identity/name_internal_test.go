package identity

import (
	"strings"
	"testing"
)

func TestNameFromHostname(t *testing.T) {
	long := strings.Repeat("h", 70)
	// 63 ASCII bytes then a 2-byte rune: byte 64 is mid-rune, so the cut must back off to 63.
	midRune := strings.Repeat("a", 63) + "é" + "tail"
	for _, tc := range []struct{ in, want string }{
		{"build-box", "build-box"},
		{"build-box.example.com", "build-box.example.com"},
		{"  padded\n", "padded"},
		{"", "cmbnode"},
		{"bad\x01host", "cmbnode"},
		{long, long[:64]},
		{midRune, strings.Repeat("a", 63)},
		{strings.Repeat("é", 40), strings.Repeat("é", 32)},
	} {
		if got := nameFromHostname(tc.in); got != tc.want {
			t.Errorf("nameFromHostname(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWithShortIDFitsAName(t *testing.T) {
	id := "0198a2b4-79d8-7d64-9a71-0e01f73a1a2b"
	if got := withShortID("vm", id); got != "vm-1a2b" {
		t.Errorf("withShortID = %q, want vm-1a2b", got)
	}
	long := strings.Repeat("é", 32) // 64 bytes: the suffix needs the last 5
	got := withShortID(long, id)
	if len(got) > 64 || !strings.HasSuffix(got, "-1a2b") || got != strings.Repeat("é", 29)+"-1a2b" {
		t.Errorf("withShortID(long) = %q (%d bytes)", got, len(got))
	}
}
