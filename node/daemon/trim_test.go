package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The end of loading is trimmed once, then each burst once, after it ends;
// with no activity nothing is
// trimmed however long it waits.
func TestAfterBurstsTrimsOncePerBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	active := make(chan struct{}, 1)
	// While bursting, every look finds new records.
	var count atomic.Int64
	var bursting atomic.Bool
	activity := func() int64 {
		if bursting.Load() {
			return count.Add(1)
		}
		return count.Load()
	}
	var trims atomic.Int64
	trimmed := make(chan struct{}, 8)
	done := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(done)
		afterBursts(ctx, loaded, active, activity, time.Millisecond, func() { trims.Add(1); trimmed <- struct{}{} }, nil)
	}()
	time.Sleep(20 * time.Millisecond)
	if n := trims.Load(); n != 0 {
		t.Fatalf("%d trims before loading ended", n)
	}
	// The end of loading is trimmed once, at once.
	close(loaded)
	select {
	case <-trimmed:
	case <-time.After(20 * time.Second):
		t.Fatal("the end of loading was never trimmed")
	}
	time.Sleep(50 * time.Millisecond) // fifty looks' worth with nothing to do
	if n := trims.Load(); n != 1 {
		t.Fatalf("%d trims with no activity after loading", n)
	}
	for burst := 1; burst <= 2; burst++ {
		bursting.Store(true)
		active <- struct{}{}
		time.Sleep(20 * time.Millisecond)
		if n := trims.Load(); n != int64(burst) {
			t.Fatalf("%d trims during burst %d", n, burst)
		}
		bursting.Store(false)
		select {
		case <-trimmed:
		case <-time.After(20 * time.Second):
			t.Fatalf("burst %d never trimmed", burst)
		}
		time.Sleep(50 * time.Millisecond)
		if n := trims.Load(); n != int64(burst+1) {
			t.Fatalf("%d trims after %d bursts", n, burst)
		}
	}
	cancel()
	<-done
}
