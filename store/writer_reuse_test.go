package store

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestPutReusedBatches: concurrent puts of one and of several records,
// with annexes, go through batches the index hands back for reuse (their
// slices, pointer buffers and done channels): every record reads back
// byte for byte with its annex, is in the order and text indexes, and
// reads back again after a reopen replays nothing wrongly pointed.
func TestPutReusedBatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	const writers, rounds = 6, 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []Entry
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				n := 1 + (w+r)%4 // single puts and batches of up to four
				items := make([]Item, n)
				for i := range items {
					name := fmt.Sprintf("w%d-r%d-i%d", w, r, i)
					e := mkEntry(name, testBase+int64(w*1000+r*10+i), "reuse "+name)
					items[i] = Item{Entry: e, Annexes: []ItemAnnex{{NS: "v", Value: []byte("annex " + name)}}}
				}
				res, err := s.PutMany(ctx, items)
				if err != nil {
					t.Error(err)
					return
				}
				for i, r := range res {
					if r.Err != nil || r.Duplicate || r.Record.Key != items[i].Entry.Key {
						t.Errorf("put %s: %+v", items[i].Entry.Key, r)
					}
				}
				mu.Lock()
				for _, it := range items {
					all = append(all, it.Entry)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	check := func(s *Store, when string) {
		t.Helper()
		if got := s.Count(); got != len(all) {
			t.Fatalf("%s: %d records, want %d", when, got, len(all))
		}
		scanned := map[string]bool{}
		if err := s.Scan(ctx, Window{AnyGroup: true}, func(kt KeyTime) error { scanned[kt.Key] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		for _, e := range all {
			r, err := s.Get(ctx, e.Key)
			if err != nil || !bytes.Equal(r.Raw, e.Raw) || r.Texts != e.Texts {
				t.Fatalf("%s: %s reads back %q %v, want %q", when, e.Key, r.Raw, err, e.Raw)
			}
			v, ok, err := s.GetAnnex(ctx, "v", e.Key)
			if want := "annex " + e.Texts[0][len("reuse "):]; err != nil || !ok || string(v) != want {
				t.Fatalf("%s: annex of %s: %q %v %v, want %q", when, e.Key, v, ok, err, want)
			}
			if !scanned[e.Key] {
				t.Fatalf("%s: %s is not in the order index", when, e.Key)
			}
		}
		hits, err := s.Search(ctx, "reuse", SearchOptions{Limit: 1000})
		if err != nil || len(hits) != len(all) {
			t.Fatalf("%s: search finds %d records (%v), want %d", when, len(hits), err, len(all))
		}
	}
	check(s, "written")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openTest(t, dir), "reopened")
}

// TestFreeBatchEmpties: a batch given back holds nothing of its jobs and
// comes out of newBatch empty, numbered as asked.
func TestFreeBatchEmpties(t *testing.T) {
	s := openTest(t, t.TempDir())
	j := &job{}
	b := &batch{seq: 7, jobs: []*job{j}, errs: []error{fmt.Errorf("x")}, afters: []indexWork{afterFunc(func() {})},
		ops: []walOp{{key: []byte("k"), val: []byte("v")}}, ptrs: []byte{1, 2}, size: 9, count: 1,
		write: true, applied: true, newKeys: []string{"k"}, goneKeys: []string{"g"}}
	jobs, ops := b.jobs, b.ops
	s.freeBatch(b)
	if jobs[:1][0] != nil || ops[:1][0].key != nil {
		t.Fatal("a freed batch still refers to its jobs or ops")
	}
	for range 10 { // the pool may drop it: ask until it comes back or give up
		got := s.newBatch(8)
		if got.seq != 8 || len(got.jobs)+len(got.errs)+len(got.afters)+len(got.ops)+len(got.ptrs)+len(got.newKeys)+len(got.goneKeys) != 0 ||
			got.size != 0 || got.count != 0 || got.write || got.applied || got.refused != nil {
			t.Fatalf("newBatch: %+v", got)
		}
	}
}
