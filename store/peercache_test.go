package store

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPeerCacheSeesWrites: GetPeer answers from what it read before, but
// every roster write is seen once its call returns (a new pin, a
// replacement, a trust, a deletion), and changing a Peer GetPeer returned
// changes nothing held. GetPeerShared, asked each time first, answers the
// same.
func TestPeerCacheSeesWrites(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	get := func() Peer {
		t.Helper()
		shared, serr := s.GetPeerShared(ctx, "n1")
		p, err := s.GetPeer(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if serr != nil || !reflect.DeepEqual(shared, p) {
			t.Fatalf("GetPeerShared: %+v, %v; GetPeer: %+v", shared, serr, p)
		}
		return p
	}
	k1, k2, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	if _, err := s.PutPeer(ctx, Peer{NodeID: "n1", Ed25519: k1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if p := get(); !bytes.Equal(p.Ed25519, k1) || p.Name != "one" {
		t.Fatalf("after the pin: %+v", p)
	}
	p := get() // cached now
	p.Ed25519[0], p.Name = 9, "changed"
	if p := get(); !bytes.Equal(p.Ed25519, k1) || p.Name != "one" {
		t.Fatalf("a caller's change reached the roster: %+v", p)
	}
	// A confirmed sighting replaces the unconfirmed pin.
	if up, err := s.PutPeer(ctx, Peer{NodeID: "n1", Ed25519: k2, Confirmed: true}); err != nil || up.Replaced == nil {
		t.Fatalf("replacement: %+v %v", up, err)
	}
	if p := get(); !bytes.Equal(p.Ed25519, k2) || !p.Confirmed {
		t.Fatalf("after the replacement: %+v", p)
	}
	if _, _, err := s.TrustPeer(ctx, Peer{NodeID: "n1", Ed25519: k3}); err != nil {
		t.Fatal(err)
	}
	if p := get(); !bytes.Equal(p.Ed25519, k3) || !p.Trusted {
		t.Fatalf("after the trust: %+v", p)
	}
	if err := s.DeletePeer(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPeer(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the deletion: %v", err)
	}
	if _, err := s.GetPeerShared(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("shared, after the deletion: %v", err)
	}
}

// TestPeerCacheConcurrent: while readers look a peer up without pause, each
// write is seen by every lookup that begins after it returned.
func TestPeerCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	key := bytes.Repeat([]byte{7}, 32)
	if _, _, err := s.TrustPeer(ctx, Peer{NodeID: "n1", Ed25519: key, Name: "0"}); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var returned atomic.Int64 // the last name whose write returned
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 4 {
		wg.Go(func() {
			for !done.Load() {
				before := returned.Load()
				p, err := s.GetPeer(ctx, "n1")
				if err != nil {
					failed.Store(err.Error())
					return
				}
				if n, _ := strconv.ParseInt(p.Name, 10, 64); n < before {
					failed.Store("read name " + p.Name + " after write " + strconv.FormatInt(before, 10) + " returned")
					return
				}
			}
		})
	}
	for i := int64(1); i <= 150 && failed.Load() == nil; i++ {
		if _, _, err := s.TrustPeer(ctx, Peer{NodeID: "n1", Ed25519: key, Name: strconv.FormatInt(i, 10)}); err != nil {
			t.Fatal(err)
		}
		returned.Store(i)
	}
	done.Store(true)
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
}
