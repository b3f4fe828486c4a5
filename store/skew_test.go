package store

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"
)

const (
	minuteMs = int64(time.Minute / time.Millisecond)
	yearMs   = 365 * 24 * 60 * minuteMs
)

// skewRecords are what a node with a correct clock receives at testBase:
// one record from the past, one from an author whose clock is 2 minutes
// ahead (within the default skew) and one dated a year ahead.
func skewRecords() (past, near, far Entry) {
	past = mkEntry("past", testBase-minuteMs, "clock drift past")
	near = mkEntry("near", testBase+2*minuteMs, "clock drift near")
	far = mkEntry("far", testBase+yearMs, "clock drift far")
	return past, near, far
}

// TestFutureDatedClampedForRecall: a record dated far ahead of its arrival
// takes its arrival time in every time-ordered view (Recent, KeysSince,
// Buckets, Search's AsOf and recency), also after a reopen, while Get still
// returns the author's createdAt and bytes; a record within the skew keeps
// its own time.
func TestFutureDatedClampedForRecall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.UnixMilli(testBase)
	opts := Options{Now: func() time.Time { return now }}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	past, near, far := skewRecords()
	for _, e := range []Entry{past, near, far} {
		mustPut(t, s, e)
	}

	check := func(s *Store, when string) {
		t.Helper()
		got, err := s.Get(ctx, far.Key)
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt != far.CreatedAt || !bytes.Equal(got.Raw, far.Raw) {
			t.Fatalf("%s: Get returned createdAt %d (raw %q), want the author's %d", when, got.CreatedAt, got.Raw, far.CreatedAt)
		}
		recent, err := s.Recent(ctx, "g1", 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []KeyTime{{near.Key, near.CreatedAt}, {far.Key, testBase}, {past.Key, past.CreatedAt}}
		if !slices.Equal(recent, want) {
			t.Fatalf("%s: Recent = %v, want %v", when, recent, want)
		}
		since, err := s.KeysSince(ctx, "g1", testBase+1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := []KeyTime{{near.Key, near.CreatedAt}}; !slices.Equal(since, want) {
			t.Fatalf("%s: KeysSince(arrival+1ms) = %v, want only the record within the skew %v", when, since, want)
		}
		buckets, err := s.Buckets(ctx, "g1", testBase-60*minuteMs, testBase+60*minuteMs, minuteMs)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, b := range buckets {
			n += b.Count
		}
		if n != 3 {
			t.Fatalf("%s: buckets around the arrival hold %d records, want 3: %+v", when, n, buckets)
		}
		// Recall as of the arrival: the far-dated record is there, at its
		// arrival; the one 2 minutes ahead is not yet.
		hits, err := s.Search(ctx, "drift", SearchOptions{AsOf: time.UnixMilli(testBase), RecencyWeight: 0.1})
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]int64{}
		for _, h := range hits {
			found[h.Key] = h.CreatedAt
		}
		if at, ok := found[far.Key]; !ok || at != testBase {
			t.Fatalf("%s: recall as of the arrival: far-dated record found=%v at %d, want found at %d (hits %+v)", when, ok, at, testBase, hits)
		}
		if _, ok := found[near.Key]; ok {
			t.Fatalf("%s: recall as of the arrival shows the record dated 2 minutes later", when)
		}
		if _, ok := found[past.Key]; !ok {
			t.Fatalf("%s: recall lost the past record", when)
		}
		if err := s.Check(ctx); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check(s, "after put")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The clamp comes from the stored arrival time, not the clock at Open.
	now = now.Add(time.Duration(2*yearMs) * time.Millisecond)
	s, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	check(s, "after reopen")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A tighter MaxClockSkew clamps the record 2 minutes ahead too.
	s, err = Open(dir, Options{Now: opts.Now, MaxClockSkew: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recent, err := s.Recent(ctx, "g1", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyTime{{far.Key, testBase}, {near.Key, testBase}, {past.Key, past.CreatedAt}}
	if !slices.Equal(recent, want) {
		t.Fatalf("MaxClockSkew 1m: Recent = %v, want %v", recent, want)
	}
}

// TestFutureDatedPurgedByRetention: retention purges a record dated far
// ahead like any record that arrived when it did; one within the skew is
// purged by its own time.
func TestFutureDatedPurgedByRetention(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(testBase)
	s, err := Open(t.TempDir(), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, near, far := skewRecords()
	then := mkEntry("then", testBase, "arrived with far")
	for _, e := range []Entry{near, far, then} {
		mustPut(t, s, e)
	}
	// An hour's retention, an hour and a minute later: the cutoff is a
	// minute after the arrival, before near's own time.
	now = now.Add(time.Hour + time.Minute)
	res, err := s.Purge(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	has := func(e Entry) bool {
		ok, err := s.Has(ctx, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if res.Deleted != 2 || has(far) || has(then) || !has(near) {
		t.Fatalf("purge %+v: far kept=%v, then kept=%v, near kept=%v; want far and then purged, near kept",
			res, has(far), has(then), has(near))
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if res, err := s.Purge(ctx, time.Hour); err != nil || res.Deleted != 1 || has(near) {
		t.Fatalf("second purge %+v %v: near kept=%v, want it purged", res, err, has(near))
	}
}
