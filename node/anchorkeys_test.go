package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// TestNearestFromTerms: the nearest anchors found from a record's index
// terms are those Search finds for its evaluable texts, trimmed and joined
// by newlines, whatever white space ends them (ASCII, which no term holds;
// U+00A0 and U+202F, which send the search back to the trimmed text) and
// with fields that are empty or "neutral" in any spelling.
func TestNearestFromTerms(t *testing.T) {
	ctx := context.Background()
	n, _ := openNode(t, "alice", "alpha")
	n.adm.recent = 0 // nearest anchors only
	rng := rand.New(rand.NewPCG(4, 2))
	words := []string{"parser", "release", "ships", "friday", "freeze", "migration", "quorum", "latency", "peers", "sync", "Straße", "café"}
	ends := []string{"", " ", "\n", "\t ", "\u00a0", "\u202f", " \u202f"}
	text := func() string {
		switch rng.IntN(9) {
		case 0:
			return ""
		case 1:
			return " Neutral\n"
		}
		var b strings.Builder
		b.WriteString(ends[rng.IntN(len(ends))])
		for range 1 + rng.IntN(8) {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteString(fmt.Sprint(rng.IntN(50)))
		b.WriteString(ends[rng.IntN(len(ends))])
		return b.String()
	}
	record := func() cmb.Fields {
		var f cmb.Fields
		for i := range f {
			f[i].Text = text()
		}
		if f[cmb.Focus].Text == "" {
			f[cmb.Focus].Text = "focus"
		}
		return f
	}
	for range 150 {
		if _, err := n.Remember(ctx, RememberInput{Fields: record()}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		f := record()
		all := f.Texts()
		texts := fieldTexts(all)
		kts, terms, _, err := n.anchorKeys(ctx, "alpha", all, texts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if terms == nil {
			t.Fatal("no terms for the index")
		}
		var q strings.Builder
		for _, name := range cmb.FieldNames {
			if t, ok := texts[name]; ok {
				q.WriteString(t)
				q.WriteByte('\n')
			}
		}
		hits, err := n.st.Search(ctx, q.String(), store.SearchOptions{Limit: 4 * n.adm.nearest, Group: "alpha", MaxTerms: nearestTerms})
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for _, h := range hits[:min(len(hits), n.adm.nearest)] {
			want = append(want, h.Key)
		}
		for _, kt := range kts {
			got = append(got, kt.Key)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("record %d %q: nearest %v, Search finds %v", i, all, got, want)
		}
	}
}
