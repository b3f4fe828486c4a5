package store

import (
	"context"
	"sync"
	"sync/atomic"
)

// watermark is a sequence number that only grows, and that readers can wait
// to reach.
type watermark struct {
	mu sync.Mutex
	// v is stored under mu, and read without it by a wait that finds it
	// already reached: it only grows, so that wait's answer is final.
	v  atomic.Uint64
	ch chan struct{} // closed at the next advance; nil when nobody waits
}

func (w *watermark) advance(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v <= w.v.Load() {
		return
	}
	w.v.Store(v)
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// wait returns once the watermark is at least v, or ctx is done.
func (w *watermark) wait(ctx context.Context, v uint64) error {
	if w.v.Load() >= v {
		return nil
	}
	for {
		w.mu.Lock()
		if w.v.Load() >= v {
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
