package store

import (
	"context"
	"errors"
	"testing"
)

// TestForgetHidesDeletesAndRemembersTheTombstone: a forgotten record that
// held lineage names is kept hidden; one nothing names is deleted; both
// leave search and the orders, stay forgotten across a restart, and a
// put of either key again stores nothing. Check stays clean throughout,
// and finds a tombstone whose record is surfaced.
func TestForgetHidesDeletesAndRemembersTheTombstone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := mkEntry("root", testBase, "launch memo root")
	kid := mkEntry("kid", testBase+1, "launch memo reply")
	kid.Parents, kid.Ancestors = []string{root.Key}, []string{root.Key}
	lone := mkEntry("lone", testBase+2, "launch memo alone")
	for _, e := range []Entry{root, kid, lone} {
		mustPut(t, s, e)
	}
	if ok, err := s.PutAssertion(ctx, root.Key, "author-z", []byte(`{"by":"z"}`)); err != nil || !ok {
		t.Fatalf("PutAssertion: %v %v", ok, err)
	}
	res, err := s.Forget(ctx, root.Key)
	if err != nil || !res.Kept || res.Already || res.Assertions != 1 {
		t.Fatalf("Forget(root) = %+v %v, want kept for kid's lineage, its assertion dropped", res, err)
	}
	if res, err := s.Forget(ctx, lone.Key); err != nil || res.Kept {
		t.Fatalf("Forget(lone) = %+v %v, want deleted", res, err)
	}
	if res, err := s.Forget(ctx, lone.Key); err != nil || !res.Already {
		t.Fatalf("Forget again = %+v %v, want already", res, err)
	}
	if _, err := s.Forget(ctx, testKey("never")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Forget(not held) = %v, want not found", err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		hits, err := s.Search(ctx, "launch memo", SearchOptions{Limit: 10})
		if err != nil || len(hits) != 1 || hits[0].Key != kid.Key {
			t.Fatalf("%s: search found %+v %v, want only kid", when, hits, err)
		}
		recent, err := s.Recent(ctx, "g1", 10)
		if err != nil || len(recent) != 1 || recent[0].Key != kid.Key {
			t.Fatalf("%s: recent %+v %v, want only kid", when, recent, err)
		}
		if !s.IsForgotten(root.Key) || !s.IsForgotten(lone.Key) || s.IsForgotten(kid.Key) || !s.IsHidden(root.Key) {
			t.Fatalf("%s: forgotten set wrong", when)
		}
		r, err := s.Get(ctx, root.Key)
		if err != nil || !r.Meta.Forgotten {
			t.Fatalf("%s: Get(root) = %+v %v, want kept, hidden", when, r.Meta, err)
		}
		if refs, _ := s.ReferencedBy(ctx, root.Key); len(refs) != 1 || refs[0] != kid.Key {
			t.Fatalf("%s: kid's lineage edge to root lost: %v", when, refs)
		}
		if ok, err := s.Has(ctx, lone.Key); err != nil || ok {
			t.Fatalf("%s: Has(lone) = %v %v, want deleted", when, ok, err)
		}
		if a, err := s.Assertions(ctx, root.Key); err != nil || len(a) != 0 {
			t.Fatalf("%s: assertions of a forgotten record: %v %v", when, a, err)
		}
		for _, e := range []Entry{root, lone} {
			res, err := s.PutMany(ctx, []Item{{Entry: e, Meta: Meta{Source: "peer"}}})
			if err != nil || res[0].Err != nil || !res[0].Duplicate || !res[0].Forgotten {
				t.Fatalf("%s: putting forgotten %s again: %+v %v", when, e.Key, res, err)
			}
		}
		if n := s.Count(); n != 2 {
			t.Fatalf("%s: count %d, want 2 (kid, and root kept hidden)", when, n)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check(s, "after forget")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	check(s, "after reopen")

	// Check notices a tombstone over a surfaced record.
	j := newJob(ctx, 64, func(t *wtx) (func(), error) {
		t.set(tombKey(kid.Key), []byte{0})
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		t.Fatal(err)
	}
	var ce *CheckError
	if err := s.Check(ctx); !errors.As(err, &ce) {
		t.Fatalf("Check with a stray tombstone: %v", err)
	}
}

// TestAssertionsKeptPerAuthor: another author's record of held content
// is kept once per author, never for the held record's own author, and
// Check rejects an assertion whose record is gone.
func TestAssertionsKeptPerAuthor(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	e := mkEntry("same", testBase, "same text")
	mustPut(t, s, e)
	for _, tc := range []struct {
		author string
		want   bool
	}{{"author-b", true}, {"author-b", false}, {e.CreatedBy, false}, {"author-c", true}} {
		if ok, err := s.PutAssertion(ctx, e.Key, tc.author, []byte(`{"signed":"`+tc.author+`"}`)); err != nil || ok != tc.want {
			t.Fatalf("PutAssertion(%s) = %v %v, want %v", tc.author, ok, err, tc.want)
		}
	}
	if ok, err := s.PutAssertion(ctx, testKey("absent"), "author-b", []byte("x")); err != nil || ok {
		t.Fatalf("assertion of a record not held: %v %v", ok, err)
	}
	a, err := s.Assertions(ctx, e.Key)
	if err != nil || len(a) != 2 || a[0].Author != "author-b" || a[1].Author != "author-c" || string(a[0].Raw) != `{"signed":"author-b"}` {
		t.Fatalf("Assertions = %+v %v", a, err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Purge takes them with the record.
	if res, err := s.PurgeBefore(ctx, testBase+1); err != nil || res.Deleted != 1 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if a, _ := s.Assertions(ctx, e.Key); len(a) != 0 {
		t.Fatalf("assertions outlived their record: %v", a)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	j := newJob(ctx, 64, func(t *wtx) (func(), error) {
		t.set(assertKey(e.Key, "author-b"), []byte("x"))
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		t.Fatal(err)
	}
	var ce *CheckError
	if err := s.Check(ctx); !errors.As(err, &ce) {
		t.Fatalf("Check with an orphan assertion: %v", err)
	}
}
