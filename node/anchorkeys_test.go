package node

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// TestNearestAreNearCopies: the nearest anchors are the records of the
// group at least half of whose signature bins agree with the record's,
// most agreeing first, then newest, as a comparison with every stored
// record finds them, whether they were stored before the group's first
// lookup (read from the store) or after it (added as stored), and whatever
// white space, case, punctuation, empty or "neutral" fields the texts
// hold.
func TestNearestAreNearCopies(t *testing.T) {
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
	// edit makes a near-copy: one field's case, punctuation or one word.
	edit := func(f cmb.Fields) cmb.Fields {
		i := rng.IntN(cmb.NumFields)
		switch rng.IntN(3) {
		case 0:
			f[i].Text = strings.ToUpper(f[i].Text)
		case 1:
			f[i].Text = strings.ReplaceAll(f[i].Text, " ", ", ")
		default:
			f[i].Text += " " + words[rng.IntN(len(words))]
		}
		return f
	}
	var stored []cmb.Fields
	remember := func(f cmb.Fields) {
		if _, err := n.Remember(ctx, RememberInput{Fields: f}); err != nil && !strings.Contains(err.Error(), "duplicate") {
			t.Fatal(err)
		}
		stored = append(stored, f)
	}
	probe := func(i int) cmb.Fields {
		if len(stored) > 0 && i%2 == 0 {
			return edit(stored[rng.IntN(len(stored))])
		}
		return record()
	}
	for i := range 150 {
		remember(probe(i))
	}
	check := func(i int) {
		f := probe(i)
		all := f.Texts()
		kts, err := anchorsOf(ctx, n, "alpha", sigOf(n, &all))
		if err != nil {
			t.Fatal(err)
		}
		want := bruteNearest(t, n, &all)
		var got []string
		for _, kt := range kts {
			got = append(got, kt.Key)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("record %d %q: nearest %v, a comparison with every record finds %v", i, all, got, want)
		}
	}
	found := 0
	for i := range 100 {
		check(i)
		if i%2 == 0 {
			found++
		}
	}
	for i := range 100 { // stored after the first lookup
		remember(probe(i))
		check(i)
	}
	if found == 0 {
		t.Fatal("no near-copy probed")
	}
}

// bruteNearest is the keys of group alpha's first Nearest records by
// signature agreement, compared with every stored record.
func bruteNearest(t *testing.T, n *Node, all *[cmb.NumFields]string) []string {
	t.Helper()
	ctx := context.Background()
	sig, ok, _ := nearSignature(n.adm.hashed, all, nil)
	if !ok {
		return nil
	}
	type cand struct {
		kt    store.KeyTime
		agree int
	}
	var cs []cand
	err := n.st.Scan(ctx, store.Window{Group: "alpha"}, func(kt store.KeyTime) error {
		r, err := n.st.GetLineage(ctx, kt.Key)
		if err != nil {
			return err
		}
		s, ok, _ := nearSignature(n.adm.hashed, &r.Texts, nil)
		if a := agree(&sig, &s); ok && a >= nearAgree {
			cs = append(cs, cand{kt, a})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(cs, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.agree, a.agree), cmp.Compare(b.kt.CreatedAt, a.kt.CreatedAt), cmp.Compare(a.kt.Key, b.kt.Key))
	})
	var out []string
	for _, c := range cs[:min(len(cs), n.adm.nearest)] {
		out = append(out, c.kt.Key)
	}
	return out
}

// sigOf is all's near-copy signature as judge makes it (nil: no word).
// anchorsOf are the anchors judge evaluates a record of group against,
// whose signature is sig: the recent ones, then the near-copies.
func anchorsOf(ctx context.Context, n *Node, group string, sig *nearSig) ([]store.KeyTime, error) {
	kts, err := n.recentAnchors(ctx, group)
	if err != nil {
		return nil, err
	}
	return n.nearAnchors(ctx, group, sig, kts)
}

func sigOf(n *Node, all *[cmb.NumFields]string) *nearSig {
	sig, ok, _ := nearSignature(n.adm.hashed, all, nil)
	if !ok {
		return nil
	}
	return &sig
}

// TestForgottenIsNoNearCopy: a forgotten record stays in its group's
// near-copy table but is never a nearest anchor.
func TestForgottenIsNoNearCopy(t *testing.T) {
	ctx := context.Background()
	n, _ := openNode(t, "alice", "alpha")
	n.adm.recent = 0 // nearest anchors only
	f := standardFields(1)[0]
	res, err := n.Remember(ctx, RememberInput{Fields: f})
	if err != nil {
		t.Fatal(err)
	}
	f[cmb.Focus].Text += " again"
	all := f.Texts()
	nearest := func() []store.KeyTime {
		kts, err := anchorsOf(ctx, n, "alpha", sigOf(n, &all))
		if err != nil {
			t.Fatal(err)
		}
		return kts
	}
	if kts := nearest(); len(kts) != 1 || kts[0].Key != res.Key {
		t.Fatalf("nearest %v, want the original %s", kts, res.Key)
	}
	if _, err := n.Forget(ctx, res.Key); err != nil {
		t.Fatal(err)
	}
	if kts := nearest(); len(kts) != 0 {
		t.Fatalf("nearest %v after the original was forgotten", kts)
	}
}
