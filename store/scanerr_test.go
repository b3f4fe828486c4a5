package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// stopErr is a caller's own error type, matched with errors.As.
type stopErr struct{ at int64 }

func (e *stopErr) Error() string { return fmt.Sprintf("stopped at %d", e.at) }

// TestScanStopErrors: a Scan stopped by its fn or its context returns an
// error that reads "scanning records: " and the cause, and that errors.Is
// and errors.As match to the cause, sentinel or typed, the store's own
// errEnough included; a Scan that runs out returns nil.
func TestScanStopErrors(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	for i := range 3 {
		mustPut(t, s, mkEntry(fmt.Sprintf("s%d", i), testBase+int64(i)))
	}
	sentinel := errors.New("seen enough")
	for _, stop := range []error{sentinel, errEnough, &stopErr{at: testBase + 1}, fmt.Errorf("wrapped: %w", sentinel)} {
		n := 0
		err := s.Scan(ctx, Window{Group: "g1"}, func(kt KeyTime) error {
			if n++; n == 2 {
				return stop
			}
			return nil
		})
		if n != 2 || !errors.Is(err, stop) {
			t.Fatalf("stop %v: %d visited, error %v", stop, n, err)
		}
		if want := "scanning records: " + stop.Error(); err.Error() != want {
			t.Fatalf("error reads %q, want %q", err, want)
		}
		var se *stopErr
		if errors.As(err, &se) != errors.As(stop, &se) {
			t.Fatalf("stop %v: errors.As disagrees on %v", stop, err)
		}
		if errors.Is(stop, sentinel) && !errors.Is(err, sentinel) {
			t.Fatalf("the sentinel under %v is lost in %v", stop, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err := s.Scan(cancelled, Window{Group: "g1"}, func(KeyTime) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Scan: %v", err)
	}
	if err := s.Scan(ctx, Window{Group: "g1"}, func(KeyTime) error { return nil }); err != nil {
		t.Fatalf("a Scan that runs out: %v", err)
	}
}

// BenchmarkScanStopped is a Scan of a group's newest record that its fn
// stops at once, as callers wanting a few records do.
func BenchmarkScanStopped(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, b.TempDir())
	for i := range 100 {
		mustPut(b, s, mkEntry(fmt.Sprintf("b%d", i), testBase+int64(i)))
	}
	stop := errors.New("stop")
	b.ReportAllocs()
	for b.Loop() {
		err := s.Scan(ctx, Window{Group: "g1", Reverse: true}, func(KeyTime) error { return stop })
		if !errors.Is(err, stop) {
			b.Fatal(err)
		}
	}
}
