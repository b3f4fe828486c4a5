package node

import (
	"math"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// TestHashedRecordVectors: the compact counts expand, bit for bit, to the
// hashed kernel's float32 vectors widened to float64 (what SVAF judged
// with before counts were cached), fields with no word left out, and a
// count too large for an int16 kept exactly.
func TestHashedRecordVectors(t *testing.T) {
	h := embed.DefaultHashed()
	texts := map[string]string{
		"focus":       "Shipping the release: v2.3 on Friday, QA sign-off pending.",
		"issue":       "Ünïcode straße — 東京 and emoji 🚀 mixed with ASCII",
		"intent":      "...  ,,, !!!", // no word
		"motivation":  strings.Repeat("a ", 40000),
		"mood":        "x",
		"perspective": strings.Repeat("ab ", 70) + "cd", // a count past the table
	}
	hr := hashFields(h, texts, newHashScratch(h.Dim))
	slab := make([]float64, len(hr)*h.Dim)
	for i := range slab {
		slab[i] = math.NaN() // every value must be written
	}
	got := hr.vectors(slab, h.Dim)
	want := map[string][]float64{}
	for f, t := range texts {
		v := h.Vector(t)
		if embed.Dot(v, v) != 0 {
			want[f] = to64(v)
		}
	}
	if len(got) != len(want) || len(got) != 5 {
		t.Fatalf("%d fields, want %d (and 5)", len(got), len(want))
	}
	for f, w := range want {
		g := got[f]
		if len(g) != len(w) {
			t.Fatalf("%s: %d dimensions, want %d", f, len(g), len(w))
		}
		for i := range w {
			if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
				t.Fatalf("%s[%d] = %v, want %v", f, i, g[i], w[i])
			}
		}
	}
	// As an anchor: the same values, sparse but for the int32 field, and
	// coded but for the field whose counts span more than the table.
	var a svaf.Anchor
	slab = make([]float64, hr.slabSize(h.Dim))
	if rest := hr.anchor(&a, slab, h.Dim); len(rest) != 0 {
		t.Fatalf("%d values of the slab left over", len(rest))
	}
	if len(a.Vectors) != 1 || len(a.Sparse) != 4 {
		t.Fatalf("%d dense and %d sparse fields, want 1 and 4", len(a.Vectors), len(a.Sparse))
	}
	for f, w := range want {
		g := a.Vectors[f]
		if sp, ok := a.Sparse[f]; ok {
			g = make([]float64, sp.Dim)
			if coded := sp.Value == nil; coded != (f != "perspective") {
				t.Errorf("%s: coded %t (only a field of counts past the table is not)", f, coded)
			}
			for k, j := range sp.Index {
				if sp.At(k) == 0 || k > 0 && j <= sp.Index[k-1] {
					t.Fatalf("%s: sparse entry %d (bucket %d) is zero or out of order", f, k, j)
				}
				g[j] = sp.At(k)
			}
		}
		for i := range w {
			if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
				t.Fatalf("anchor %s[%d] = %v, want %v", f, i, g[i], w[i])
			}
		}
	}
	for _, f := range hr {
		if (f.name == "motivation") != (f.c32 != nil) {
			t.Errorf("%s: int32 counts %t", f.name, f.c32 != nil)
		}
		if wide := f.cnt != nil && int(f.hi)-int(f.lo) >= expandTable; wide != (f.name == "perspective") {
			t.Errorf("%s: counts in [%d,%d], past the table %t", f.name, f.lo, f.hi, wide)
		}
	}
}
