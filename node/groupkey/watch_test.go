package groupkey

import (
	"context"
	"os"
	"testing"
	"time"
)

// Watch reports once at the start, then each epoch a rotation or a join
// writes (by link into the directory), and ends when the directory is
// moved away; Reload after each report finds the new epoch.
func TestWatchReportsEveryEpoch(t *testing.T) {
	home := t.TempDir()
	g, err := Create(home, "alpha", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	k, err := Load(home, "alpha", Options{Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := k.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	wait("the start")
	for n := uint32(2); n <= 4; n++ {
		_, e, err := Rotate(home, "alpha", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for k.Current() != e.N {
			wait("rotation")
			if _, err := k.Reload(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("epoch %d not loaded after its reports", e.N)
			}
		}
	}
	if _, err := Join(home, "alpha", g.ID, Epoch{N: 9, Secret: [32]byte{9}, Created: time.Now()}, false); err != nil {
		t.Fatal(err)
	}
	for k.Current() != 9 {
		wait("join")
		if _, err := k.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(Dir(home, "alpha"), Dir(home, "alpha")+".aside"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watch did not end when its directory moved away")
		}
	}
}

func TestWatchInMemory(t *testing.T) {
	k := ring(t, newGroup(t, "alpha"), time.Minute, nil)
	if _, err := k.Watch(context.Background()); err != ErrNoHome {
		t.Fatalf("a keyring without files: %v, want ErrNoHome", err)
	}
}

// NextExpiry is the earliest future end of an older epoch's grace.
func TestNextExpiry(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	g := newGroup(t, "alpha")
	k := ring(t, g, 10*time.Second, func() time.Time { return now })
	if at, ok := k.NextExpiry(); ok {
		t.Fatalf("one epoch: an expiry at %v", at)
	}
	if err := k.AddEpochs(Epoch{N: 2, Secret: [32]byte{2}, Created: now.Add(-20 * time.Second)},
		Epoch{N: 3, Secret: [32]byte{3}, Created: now.Add(-5 * time.Second)},
		Epoch{N: 4, Secret: [32]byte{4}, Created: now.Add(-3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// Epoch 1 ended at -10 s; 2 ends at +5 s, 3 at +7 s; 4 is the newest.
	want := now.Add(5*time.Second + time.Nanosecond)
	if at, ok := k.NextExpiry(); !ok || !at.Equal(want) {
		t.Fatalf("next expiry %v %v, want %v", at, ok, want)
	}
	now = want.Add(-time.Nanosecond)
	if err := k.Accepts(2); err != nil {
		t.Fatalf("epoch 2 refused before its expiry: %v", err)
	}
	if at, ok := k.NextExpiry(); !ok || !at.Equal(want) {
		t.Fatalf("at the grace's last instant: next expiry %v %v, want %v", at, ok, want)
	}
	now = want
	if k.Accepts(2) == nil {
		t.Fatal("epoch 2 accepted at its expiry")
	}
	if at, ok := k.NextExpiry(); !ok || !at.Equal(now.Add(2*time.Second)) {
		t.Fatalf("after epoch 2: next expiry %v %v, want epoch 3's", at, ok)
	}
}
