package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWatermarkWait: wait returns at once for a mark already reached
// (the lock-free answer), waits for one not yet reached until an advance
// reaches it, ignores an advance that does not, and gives up with its
// context.
func TestWatermarkWait(t *testing.T) {
	ctx := context.Background()
	var w watermark
	if err := w.wait(ctx, 0); err != nil {
		t.Fatal(err)
	}
	w.advance(3)
	w.advance(2) // never moves back
	for v := range uint64(4) {
		if err := w.wait(ctx, v); err != nil {
			t.Fatalf("wait(%d) at 3: %v", v, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- w.wait(ctx, 5) }()
	w.advance(4)
	select {
	case err := <-done:
		t.Fatalf("wait(5) returned (%v) at 4", err)
	case <-time.After(20 * time.Millisecond):
	}
	w.advance(5)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := w.wait(short, 6); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait(6) at 5: %v, want the context's deadline", err)
	}
}
