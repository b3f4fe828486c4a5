package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// replayAll reads a replay to its end, a few records at a time.
func replayAll(t *testing.T, r *Replay) []AcceptedEvent {
	t.Helper()
	var out []AcceptedEvent
	for {
		evs, done, err := r.Next(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
		if done {
			return out
		}
	}
}

// TestReplayEqualsPublishedEvents: the events a replay rebuilds from the
// store are the ones Accept published, member for member (verdicts, the
// redundant record's nearest and hidden, a directed record, via and
// source), cursors included, in publish order; a forgotten record is
// skipped, and the replay's position still passes it.
func TestReplayEqualsPublishedEvents(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	start, seq0 := bob.Head()
	if seq0 != 0 || !strings.HasSuffix(start, ".0") {
		t.Fatalf("head of an empty node: %q %d", start, seq0)
	}
	sub := bob.Events().Subscribe(64)
	defer sub.Close()

	first := "The parser release ships on Friday after the code freeze"
	for _, in := range []RememberInput{
		{Fields: fields(first)},
		{Fields: fields(first + ".")}, // redundant of the first, hidden
		{Fields: fields("The parser release slips to Monday after the freeze")},
		{Fields: fields(first + "!"), To: bob.Identity().NodeID},
		{Fields: fields("kiln schedule for the pottery class")},
	} {
		if _, err := alice.Remember(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	var published []AcceptedEvent
	for range am.published {
		published = append(published, acceptedEvent(t, sub.C))
	}
	if published[1].Decision != "redundant" || !published[1].Hidden || published[3].Decision != DecisionDirected {
		t.Fatalf("the test's records did not get the verdicts it covers: %+v", published)
	}
	for i, ev := range published {
		if ev.Seq != uint64(i+1) || ev.Cursor != fmt.Sprintf("%s.%d", strings.TrimSuffix(start, ".0"), i+1) {
			t.Fatalf("event %d: seq %d cursor %q", i, ev.Seq, ev.Cursor)
		}
	}

	r, err := bob.ReplayAfter(start)
	if err != nil {
		t.Fatal(err)
	}
	got := replayAll(t, r)
	if !reflect.DeepEqual(got, published) {
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(published)
		t.Fatalf("replay differs from what was published:\nreplay    %s\npublished %s", a, b)
	}
	// As JSON too, which is what a listener compares.
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(published)
	if string(a) != string(b) {
		t.Fatalf("replay JSON differs:\n%s\n%s", a, b)
	}

	// After the second record: the rest, with the forgotten one skipped.
	if _, err := bob.Forget(ctx, published[2].Key); err != nil {
		t.Fatal(err)
	}
	r, err = bob.ReplayAfter(published[1].Cursor)
	if err != nil {
		t.Fatal(err)
	}
	got = replayAll(t, r)
	want := []AcceptedEvent{published[3], published[4]}
	if !reflect.DeepEqual(got, want) || r.Last() != published[4].Seq {
		t.Fatalf("after %s with %s forgotten: %+v (last %d), want %+v", published[1].Cursor, published[2].Key, got, r.Last(), want)
	}
	// At the head: nothing, done.
	r, err = bob.ReplayAfter(published[4].Cursor)
	if err != nil {
		t.Fatal(err)
	}
	if evs, done, err := r.Next(ctx, 10); len(evs) != 0 || !done || err != nil {
		t.Fatalf("replay after the newest: %v %v %v", evs, done, err)
	}
}

// TestReplayRefusesCursors: a cursor older than the ring or from another
// boot is expired, with the fix in its message; a malformed one, or one
// ahead of the node, is a bad request.
func TestReplayRefusesCursors(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	home := t.TempDir()
	bob := reopenableWith(t, home, "bob", Options{AcceptedRing: 4})
	introduce(t, alice, bob)
	sub := bob.Events().Subscribe(64)
	for i := range 6 {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(fmt.Sprintf("note %d about topic %d", i, i*7))}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	var evs []AcceptedEvent
	for range 6 {
		evs = append(evs, acceptedEvent(t, sub.C))
	}
	sub.Close()
	// The ring holds 3..6: resuming after 2 works, after 1 lost record 2.
	if r, err := bob.ReplayAfter(evs[1].Cursor); err != nil {
		t.Fatalf("after the newest record the ring no longer holds: %v", err)
	} else if got := replayAll(t, r); len(got) != 4 || got[0].Key != evs[2].Key {
		t.Fatalf("replay after %s: %d events", evs[1].Cursor, len(got))
	}
	_, err := bob.ReplayAfter(evs[0].Cursor)
	if !errors.Is(err, ErrCursorExpired) || !strings.Contains(err.Error(), "4 records") || !strings.Contains(err.Error(), "`export` or `recent`") {
		t.Fatalf("too old: %v", err)
	}
	boot := strings.Split(evs[0].Cursor, ".")[0]
	for _, c := range []string{"", "x", boot, boot + ".", boot + ".-1", boot + ".1.2", "zz.1", boot + ".7"} {
		if _, err := bob.ReplayAfter(c); !errors.Is(err, ErrBadRequest) || errors.Is(err, ErrCursorExpired) {
			t.Fatalf("cursor %q: %v, want a bad request", c, err)
		}
	}

	// A restart numbers anew: the old cursors are expired, never reread.
	bob.Close()
	bob = reopenableWith(t, home, "bob", Options{AcceptedRing: 4})
	defer bob.Close()
	_, err = bob.ReplayAfter(evs[5].Cursor)
	if !errors.Is(err, ErrCursorExpired) || !strings.Contains(err.Error(), "another run") || !strings.Contains(err.Error(), "`listen` without `after`") {
		t.Fatalf("cursor of another boot: %v", err)
	}
	if c, _ := bob.Head(); strings.HasPrefix(c, boot+".") {
		t.Fatalf("reopened node kept the boot id %s", boot)
	}
}

// TestAcceptRingCost: the ring's cost as docs/ipc.md states it, 35 bytes
// an entry with nothing for the collector to scan (2.2 MiB when full).
func TestAcceptRingCost(t *testing.T) {
	if s := unsafe.Sizeof(acceptEntry{}); s != 35 || s*DefaultAcceptedRing > 23<<20/10 {
		t.Fatalf("an entry is %d bytes, %d when the ring is full", s, s*DefaultAcceptedRing)
	}
}
