// Package benchtext makes the text of the benchmarks' standard CMBs: made-
// up words of a fixed vocabulary drawn by Zipf's law, as prose is, so that
// admission's text search and anchors see records that differ as real ones
// do (text that is all one letter would make every record a text match of
// every other). It is used by benchmarks only.
package benchtext

import (
	"math/rand"
	"strings"
)

// Vocab is n made-up words of two to four syllables.
func Vocab(r *rand.Rand, n int) []string {
	syl := []string{"ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "in", "qua", "ber", "ni", "pol", "ust", "ee", "fra"}
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var w strings.Builder
		for range 2 + r.Intn(3) {
			w.WriteString(syl[r.Intn(len(syl))])
		}
		if !seen[w.String()] {
			seen[w.String()] = true
			out = append(out, w.String())
		}
	}
	return out
}

// Field is head followed by words of vocab drawn by z, cut at size bytes.
func Field(head string, size int, vocab []string, z *rand.Zipf) string {
	var t strings.Builder
	t.WriteString(head)
	for t.Len() < size {
		t.WriteByte(' ')
		t.WriteString(vocab[z.Uint64()])
	}
	return t.String()[:size]
}
