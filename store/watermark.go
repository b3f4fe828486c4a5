package store

import (
	"context"
	"sync"
)

// watermark is a sequence number that only grows, and that readers can wait
// to reach.
type watermark struct {
	mu sync.Mutex
	v  uint64
	ch chan struct{} // closed at the next advance; nil when nobody waits
}

func (w *watermark) advance(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v <= w.v {
		return
	}
	w.v = v
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// wait returns once the watermark is at least v, or ctx is done.
func (w *watermark) wait(ctx context.Context, v uint64) error {
	for {
		w.mu.Lock()
		if w.v >= v {
			w.mu.Unlock()
			return nil
		}
		if w.ch == nil {
			w.ch = make(chan struct{})
		}
		ch := w.ch
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
