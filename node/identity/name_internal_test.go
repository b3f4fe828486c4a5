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
