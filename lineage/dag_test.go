package lineage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/lineage/walk"
	"github.com/cmbnode/cmbnode/store"
)

const base = int64(1_751_000_000_000)

func key(s string) string {
	h := sha256.Sum256([]byte(s))
	return "cmb1-" + hex.EncodeToString(h[:])
}

// dag is a generated lineage graph with its answers computed in memory,
// independently of the store and of this package's walks.
type dag struct {
	keys     []string
	created  map[string]int64
	parents  map[string][]string
	children map[string][]string
}

// genDAG builds n records in threads of up to 40: each non-root names one
// or two recent records of its thread as parents, and now and then a record
// of an earlier thread, so threads merge. Creation times are mostly but not
// always increasing along edges (author clocks disagree).
func genDAG(n int, seed uint64) *dag {
	rng := rand.New(rand.NewPCG(seed, 11))
	d := &dag{created: map[string]int64{}, parents: map[string][]string{}, children: map[string][]string{}}
	var thread []string
	for i := range n {
		k := key(fmt.Sprintf("dag-%d-%d", seed, i))
		d.created[k] = base + int64(i)*10 + int64(rng.IntN(25)) - 12
		if len(thread) == 40 || rng.IntN(60) == 0 {
			thread = nil
		}
		var ps []string
		if len(thread) > 0 {
			ps = append(ps, thread[len(thread)-1-rng.IntN(min(3, len(thread)))])
			if len(thread) > 1 && rng.IntN(4) == 0 {
				if p := thread[rng.IntN(len(thread))]; !slices.Contains(ps, p) {
					ps = append(ps, p)
				}
			}
			if i > 100 && rng.IntN(50) == 0 {
				if p := d.keys[rng.IntN(i-50)]; !slices.Contains(ps, p) {
					ps = append(ps, p)
				}
			}
		}
		d.parents[k] = ps
		for _, p := range ps {
			d.children[p] = append(d.children[p], k)
		}
		d.keys = append(d.keys, k)
		thread = append(thread, k)
	}
	return d
}

// closure is the transitive set of ancestors (the reference answer).
func (d *dag) closure(k string, memo map[string]map[string]struct{}) map[string]struct{} {
	if m, ok := memo[k]; ok {
		return m
	}
	m := map[string]struct{}{}
	for _, p := range d.parents[k] {
		m[p] = struct{}{}
		for a := range d.closure(p, memo) {
			m[a] = struct{}{}
		}
	}
	memo[k] = m
	return m
}

// bfs returns key → hops over next, up to maxDepth (0 = unbounded).
func bfs(start string, maxDepth int, next func(string) []string) map[string]int {
	dist := map[string]int{start: 0}
	frontier := []string{start}
	for depth := 1; len(frontier) > 0 && (maxDepth == 0 || depth <= maxDepth); depth++ {
		var nf []string
		for _, k := range frontier {
			for _, n := range next(k) {
				if _, ok := dist[n]; !ok {
					dist[n] = depth
					nf = append(nf, n)
				}
			}
		}
		frontier = nf
	}
	delete(dist, start)
	return dist
}

func loadDAG(t testing.TB, d *dag) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	// The lineage each record carries is what Resolve computes from its
	// (already stored) parents: the §15.2 rule is exercised on every record.
	anc := map[string][]string{}
	var items []store.Item
	flush := func() {
		if _, err := s.PutMany(ctx, items); err != nil {
			t.Fatal(err)
		}
		items = items[:0]
	}
	for _, k := range d.keys {
		ps := d.parents[k]
		pa := make([][]string, len(ps))
		for i, p := range ps {
			pa[i] = anc[p]
		}
		anc[k] = Ancestors(ps, pa)
		e := store.Entry{Key: k, CreatedBy: "author", CreatedAt: d.created[k], Group: "g",
			Parents: ps, Ancestors: anc[k], Raw: []byte(`{}`)}
		for f := range e.Texts {
			e.Texts[f] = "neutral"
		}
		items = append(items, store.Item{Entry: e})
		if len(items) == 500 {
			flush()
		}
	}
	flush()
	return s
}

func TestDAG10k(t *testing.T) {
	ctx := context.Background()
	d := genDAG(10_000, 1)
	s := loadDAG(t, d)
	if s.Count() != len(d.keys) {
		t.Fatalf("stored %d", s.Count())
	}
	memo := map[string]map[string]struct{}{}
	up := func(k string) []string { return d.parents[k] }
	down := func(k string) []string { return d.children[k] }
	both := func(k string) []string { return append(slices.Clone(d.parents[k]), d.children[k]...) }

	rng := rand.New(rand.NewPCG(2, 2))
	sample := make([]string, 0, 400)
	for range 400 {
		sample = append(sample, d.keys[rng.IntN(len(d.keys))])
	}
	var deepest int

	for _, k := range d.keys {
		// Stored ancestors are exactly the transitive closure, roots first:
		// no ancestor appears before one of its own ancestors.
		rec, err := s.GetLineage(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want := d.closure(k, memo)
		if len(rec.Ancestors) != len(want) {
			t.Fatalf("%s: %d ancestors stored, closure has %d", k, len(rec.Ancestors), len(want))
		}
		pos := map[string]int{}
		for i, a := range rec.Ancestors {
			if _, ok := want[a]; !ok {
				t.Fatalf("%s: stray ancestor %s", k, a)
			}
			pos[a] = i
		}
		for _, a := range rec.Ancestors {
			for aa := range d.closure(a, memo) {
				if pos[aa] > pos[a] {
					t.Fatalf("%s: ancestor %s listed after its descendant %s", k, aa, a)
				}
			}
		}
		if _, err := Validate(ctx, s, k, rec.Parents, rec.Ancestors); err != nil {
			t.Fatal(err)
		}
		deepest = max(deepest, len(rec.Ancestors))
	}
	t.Logf("largest ancestor set: %d", deepest)

	check := func(what string, got []Node, want map[string]int) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d nodes, want %d", what, len(got), len(want))
		}
		for i, n := range got {
			if want[n.Key] != n.Depth || (i > 0 && got[i-1].Depth > n.Depth) {
				t.Fatalf("%s: %s at depth %d, want %d (or out of order)", what, n.Key, n.Depth, want[n.Key])
			}
			if n.CreatedAt.UnixMilli() != d.created[n.Key] {
				t.Fatalf("%s: %s createdAt %d", what, n.Key, n.CreatedAt.UnixMilli())
			}
		}
	}
	for _, k := range sample {
		for _, depth := range []int{0, 1, 3} {
			got, err := AncestorsOf(ctx, s, k, depth)
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("ancestors(%s, %d)", k, depth), got, bfs(k, depth, up))
			got, err = Descendants(ctx, s, k, depth)
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("descendants(%s, %d)", k, depth), got, bfs(k, depth, down))
		}
		// Threads: unbounded, bounded by depth, and cut at a time (records
		// created after it are neither members nor walked through), each
		// against a walk of the in-memory DAG.
		asOf := time.UnixMilli(d.created[k] + int64(rng.IntN(200)) - 100)
		before := func(next func(string) []string) func(string) []string {
			return func(k string) []string {
				return slices.DeleteFunc(slices.Clone(next(k)), func(n string) bool { return d.created[n] > asOf.UnixMilli() })
			}
		}
		for _, c := range []struct {
			name     string
			o        walk.ThreadOptions
			up, down func(string) []string
		}{
			{"unbounded", walk.ThreadOptions{}, up, down},
			{"depth 2", walk.ThreadOptions{MaxDepth: 2}, up, down},
			{"as of", walk.ThreadOptions{AsOf: &asOf}, before(up), before(down)},
		} {
			th, err := walk.Thread(ctx, View(s), k, c.o)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			if c.o.AsOf == nil || d.created[k] <= asOf.UnixMilli() {
				want = []string{k}
				for a := range bfs(k, c.o.MaxDepth, c.up) {
					want = append(want, a)
				}
				for a := range bfs(k, c.o.MaxDepth, c.down) {
					want = append(want, a)
				}
			}
			sort.Slice(want, func(i, j int) bool {
				ci, cj := d.created[want[i]], d.created[want[j]]
				if ci != cj {
					return ci < cj
				}
				return want[i] < want[j]
			})
			got := make([]string, len(th))
			for i, n := range th {
				got[i] = n.Key
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("thread (%s) of %s: %d nodes, want %d, or out of time order", c.name, k, len(got), len(want))
			}
		}
	}
	for i := 0; i+1 < len(sample) && i < 200; i += 2 {
		a, b := sample[i], sample[i+1]
		want, reachable := bfs(a, 12, both)[b]
		got, err := walk.Distance(ctx, View(s), a, b, 12)
		switch {
		case a == b:
			if err != nil || got != 0 {
				t.Fatalf("distance to self: %d %v", got, err)
			}
		case reachable:
			if err != nil || got != want {
				t.Fatalf("distance(%s, %s) = %d, %v; want %d", a, b, got, err, want)
			}
		default:
			if !errors.Is(err, walk.ErrNoPath) {
				t.Fatalf("distance(%s, %s) = %d, %v; want no path within 12", a, b, got, err)
			}
		}
	}
	// Pairs known to be close: a record and its ancestors / siblings.
	for _, k := range sample[:100] {
		for n, want := range bfs(k, 4, both) {
			got, err := walk.Distance(ctx, View(s), k, n, 0)
			if err != nil || got != want {
				t.Fatalf("distance(%s, %s) = %d, %v; want %d", k, n, got, err, want)
			}
			break
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestValidateAndMissingParents(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(name string, parents, ancestors []string) string {
		k := key(name)
		e := store.Entry{Key: k, CreatedAt: base, Group: "g", Parents: parents, Ancestors: ancestors}
		if _, _, err := s.Put(ctx, e, store.Meta{}); err != nil {
			t.Fatal(err)
		}
		return k
	}
	root := put("root", nil, nil)
	mid := put("mid", []string{root}, []string{root})
	absent := key("absent")

	anc, missing, err := Resolve(ctx, s, []string{mid, absent})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(anc, ",") != strings.Join([]string{root, mid, absent}, ",") || len(missing) != 1 || missing[0] != absent {
		t.Fatalf("Resolve: %v missing %v", anc, missing)
	}
	if m, _ := MissingParents(ctx, s, []string{root, absent}); len(m) != 1 || m[0] != absent {
		t.Fatalf("MissingParents %v", m)
	}

	self := key("new")
	rep, err := Validate(ctx, s, self, []string{mid, absent}, []string{root, mid, absent})
	if err != nil || rep.Complete() || rep.MissingParents[0] != absent {
		t.Fatalf("valid remix with a missing parent: %+v %v", rep, err)
	}
	for name, c := range map[string]struct {
		parents, ancestors []string
		want               string
	}{
		"truncated from roots": {[]string{mid}, []string{mid}, "missing from ancestors (truncated"},
		"parent not ancestor":  {[]string{mid}, []string{root}, "parent " + mid + " missing from ancestors"},
		"orphan ancestors":     {nil, []string{root}, "ancestors but no parents"},
		"self parent":          {[]string{self}, []string{self}, "itself as a parent"},
		"repeated parent":      {[]string{root, root}, []string{root}, "listed twice"},
		"cycle":                {[]string{mid}, []string{root, mid}, "cycle"},
	} {
		k := self
		if name == "cycle" {
			k = root // root claiming mid as parent: mid descends from root
		}
		_, err := Validate(ctx, s, k, c.parents, c.ancestors)
		if !errors.Is(err, ErrLineage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := AncestorsOf(ctx, s, absent, 1); !errors.Is(err, walk.ErrNotHeld) {
		t.Fatalf("walk from a missing key: %v", err)
	}
	if _, err := walk.Distance(ctx, View(s), root, absent, 0); !errors.Is(err, walk.ErrNotHeld) {
		t.Fatalf("distance to a missing key: %v", err)
	}
	if d, err := walk.Distance(ctx, View(s), root, mid, 0); err != nil || d != 1 {
		t.Fatalf("distance root-mid %d %v", d, err)
	}
	if a, ok := Anchor([]string{absent, root, mid}, func(k string) bool { ok, _ := s.Has(ctx, k); return ok }); !ok || a != root {
		t.Fatalf("anchor %s %v", a, ok)
	}
}

// BenchmarkAncestorsDepth50 walks 50 generations up a ladder DAG in which
// every record has two parents (the previous two records).
func BenchmarkAncestorsDepth50(b *testing.B) {
	ctx := context.Background()
	d := &dag{created: map[string]int64{}, parents: map[string][]string{}, children: map[string][]string{}}
	for i := range 300 {
		k := key(fmt.Sprintf("ladder-%d", i))
		d.created[k] = base + int64(i)
		switch {
		case i == 1:
			d.parents[k] = []string{d.keys[0]}
		case i > 1:
			d.parents[k] = []string{d.keys[i-1], d.keys[i-2]}
		}
		d.keys = append(d.keys, k)
	}
	s := loadDAG(b, d)
	leaf := d.keys[len(d.keys)-1]
	b.ResetTimer()
	var lat []time.Duration
	for range b.N {
		t := time.Now()
		got, err := AncestorsOf(ctx, s, leaf, 50)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		if len(got) != 100 {
			b.Fatalf("%d ancestors within 50 hops, want 100", len(got))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
}
