package store

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand"
	"slices"
	"sync/atomic"
	"testing"
)

// scanNewest is Newest as a Scan of the group, newest first: the
// reference Newest must agree with.
func scanNewest(t *testing.T, s *Store, group string, n int, keep func(KeyTime) bool) []KeyTime {
	t.Helper()
	var out []KeyTime
	stop := errors.New("stop")
	err := s.Scan(context.Background(), Window{Group: group, Reverse: true}, func(kt KeyTime) error {
		if keep(kt) {
			if out = append(out, kt); len(out) == n {
				return stop
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		t.Fatal(err)
	}
	return out
}

// TestNewestIsScan: Newest returns the records a newest-first Scan of the
// group keeping the same ones does, in its order, whether one batch
// holds them or the group must be read past it, with records stored out
// of time order, records of the same instant, one at time 0 and one
// before it (which Scan does not visit), other groups, forgotten records,
// and what was in out before kept.
func TestNewestIsScan(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	r := mrand.New(mrand.NewSource(3))
	var keys []string
	for i := range 300 {
		// Times drawn out of order, every tenth record at an instant
		// another holds.
		at := testBase + int64(r.Intn(100_000))
		if i%10 == 0 && i > 0 {
			at = testBase + int64(i)
		}
		e := mkEntry(fmt.Sprintf("n%03d", i), at)
		if i%4 == 3 {
			e.Group = "g2"
		}
		mustPut(t, s, e)
		keys = append(keys, e.Key)
	}
	// A group of few records, one before time 0: its newest are one batch.
	early := mkEntry("early", -5)
	early.Group = "small"
	mustPut(t, s, early)
	for i, at := range []int64{0, testBase, testBase - 7} {
		e := mkEntry(fmt.Sprintf("small%d", i), at)
		e.Group = "small"
		mustPut(t, s, e)
	}
	for _, k := range keys[:40:40] {
		if _, err := s.Forget(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	preds := map[string]func(KeyTime) bool{
		"all":         func(KeyTime) bool { return true },
		"one in 3":    func(kt KeyTime) bool { return kt.Key[len(kt.Key)-1]%3 == 0 },
		"one in 20":   func(kt KeyTime) bool { return kt.Key[len(kt.Key)-2]%20 == 0 },
		"none":        func(KeyTime) bool { return false },
		"not the top": func(kt KeyTime) bool { return kt.CreatedAt < testBase+90_000 },
	}
	before := []KeyTime{{Key: "before", CreatedAt: 1}}
	for name, keep := range preds {
		for _, group := range []string{"g1", "g2", "small", "none"} {
			for _, n := range []int{0, 1, 5, 33, 1000} {
				want := scanNewest(t, s, group, n, keep)
				if n == 0 {
					want = nil
				}
				got, err := s.Newest(ctx, group, n, keep, slices.Clone(before))
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[:1], before) {
					t.Fatalf("%s, %s, %d: out's first entry became %v", name, group, n, got[:1])
				}
				if !slices.Equal(got[1:], want) {
					t.Fatalf("%s, %s, %d: Newest is %v, want %v", name, group, n, got[1:], want)
				}
				if slices.ContainsFunc(got, func(kt KeyTime) bool { return kt.Key == early.Key }) {
					t.Fatalf("%s, %s, %d: the record before time 0 is among the newest", name, group, n)
				}
			}
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Newest(cancelled, "g1", 5, preds["all"], nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Newest on a cancelled context: %v", err)
	}
}

// BenchmarkNewestWhileWriting is reading a group's 5 newest records, as
// SVAF's recent anchors do for each record received, then indexing one
// more record in it, in a group of 100,000: Newest, beside the Scan it
// replaces there, whose snapshot (a clone of the tree) makes that insert
// copy the nodes on its path.
func BenchmarkNewestWhileWriting(b *testing.B) {
	ctx := context.Background()
	const held, added = 100_000, 1 << 16
	keys := make([]string, held+added)
	for i := range keys {
		keys[i] = testKey(fmt.Sprint(i))
	}
	keep := func(KeyTime) bool { return true }
	for _, v := range []struct {
		name string
		read func(s *Store, out []KeyTime) ([]KeyTime, error)
	}{
		{"Newest", func(s *Store, out []KeyTime) ([]KeyTime, error) { return s.Newest(ctx, "g", 5, keep, out) }},
		{"Scan", func(s *Store, out []KeyTime) ([]KeyTime, error) {
			stop := errors.New("stop")
			err := s.Scan(ctx, Window{Group: "g", Reverse: true}, func(kt KeyTime) error {
				if keep(kt) {
					out = append(out, kt)
				}
				if len(out) >= 5 {
					return stop
				}
				return nil
			})
			if errors.Is(err, stop) {
				err = nil
			}
			return out, err
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			s := openTest(b, b.TempDir())
			for i, k := range keys[:held] {
				s.order.add(k, testBase+int64(i), "g", "a")
			}
			out := make([]KeyTime, 0, 10)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				var err error
				if out, err = v.read(s, out[:0]); err != nil || len(out) != 5 {
					b.Fatal(len(out), err)
				}
				i := held + n%added
				s.order.add(keys[i], testBase+int64(i), "g", "a")
				n++
			}
		})
	}
}

// TestNewestWhileIndexing: with records indexed into the group as it
// reads, Newest returns n records kept, newest first, and every record
// indexed before the call that is newer than its last is among them,
// whether one batch holds them (n = 5) or not (n = 40).
func TestNewestWhileIndexing(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	const held, written = 2000, 20000
	for i := range held {
		s.order.add(testKey(fmt.Sprint(i)), testBase+int64(i%500)*3, "g", "a")
	}
	// The writer's records: most land among the newest, some far back.
	w := make([]KeyTime, written)
	for i := range w {
		w[i] = KeyTime{Key: testKey(fmt.Sprint("w", i)), CreatedAt: testBase + 1500 + int64(i)}
		if i%3 == 0 {
			w[i].CreatedAt = testBase + int64(i%1500)
		}
	}
	start, done := make(chan struct{}), make(chan struct{})
	var indexed atomic.Int64 // records the writer has indexed
	go func() {
		defer close(done)
		<-start
		for i, kt := range w {
			s.order.add(kt.Key, kt.CreatedAt, "g", "a")
			indexed.Store(int64(i + 1))
		}
	}()
	keep := func(kt KeyTime) bool { return kt.Key[6]%4 != 0 } // three in four
	for calls := 0; ; calls++ {
		if calls == 1 {
			close(start)
		}
		select {
		case <-done:
			return
		default:
		}
		n := []int{5, 40}[calls%2]
		before := indexed.Load()
		got, err := s.Newest(ctx, "g", n, keep, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("%d records, want %d", len(got), n)
		}
		for i, kt := range got {
			if !keep(kt) {
				t.Fatalf("%v is not kept", kt)
			}
			if i > 0 && !lessKeyTime(kt, got[i-1]) {
				t.Fatalf("%v after %v: not newest first", kt, got[i-1])
			}
		}
		last := got[len(got)-1]
		for _, kt := range w[:before] {
			if keep(kt) && lessKeyTime(last, kt) && !slices.Contains(got, kt) {
				t.Fatalf("%v, indexed before the call and newer than the last returned, is missing", kt)
			}
		}
	}
}
