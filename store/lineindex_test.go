package store

import (
	"context"
	"slices"
	"testing"
)

// TestIndexedLineage: the in-memory lineage agrees with the records
// through every way a record enters or leaves the surfaced set: a child
// stored before its parent, a reopen (rebuilt from the records),
// quarantine and its release, forget; Check finds it consistent
// throughout.
func TestIndexedLineage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	p, c1, c2 := mkEntry("p", testBase, "parent"), mkEntry("c1", testBase+1, "first child"), mkEntry("c2", testBase+2, "second child")
	c1.Parents, c2.Parents = []string{p.Key}, []string{p.Key, testKey("never stored")}
	mustPut(t, s, c1) // before its parent
	mustPut(t, s, p)
	mustPut(t, s, c2)

	want := func(s *Store, key string, held bool, parents, children []string) {
		t.Helper()
		n, ok, err := s.IndexedLineage(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(n.Children)
		slices.Sort(children)
		if ok != held || (held && (!slices.Equal(n.Parents, parents) || !slices.Equal(n.Children, children))) {
			t.Fatalf("lineage of %s: held %v parents %v children %v; want held %v parents %v children %v",
				key, ok, n.Parents, n.Children, held, parents, children)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("check: %v", err)
		}
	}
	want(s, p.Key, true, nil, []string{c1.Key, c2.Key})
	want(s, c2.Key, true, c2.Parents, nil)
	if n, _, _ := s.IndexedLineage(ctx, c1.Key); n.At != c1.CreatedAt {
		t.Fatalf("c1 at %d, want %d", n.At, c1.CreatedAt)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	want(s, p.Key, true, nil, []string{c1.Key, c2.Key})

	if _, err := s.Quarantine(ctx, []string{c1.Key}); err != nil {
		t.Fatal(err)
	}
	want(s, c1.Key, false, nil, nil)
	want(s, p.Key, true, nil, []string{c2.Key})
	if _, err := s.Unquarantine(ctx, []string{c1.Key}); err != nil {
		t.Fatal(err)
	}
	want(s, p.Key, true, nil, []string{c1.Key, c2.Key})

	if _, err := s.Forget(ctx, c2.Key); err != nil {
		t.Fatal(err)
	}
	want(s, c2.Key, false, nil, nil)
	want(s, p.Key, true, nil, []string{c1.Key})
}
