package ipc

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/identity"
)

// feed hands the node records of another member through its receive
// pipeline (Check, then Accept), as the mesh does.
type feed struct {
	peer *identity.Identity
	n    atomic.Int64
}

func newFeed(t *testing.T) *feed {
	t.Helper()
	peer, err := identity.Create(t.TempDir(), "peer", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &feed{peer: peer}
}

// accept makes one ~10 KB record and has the node accept it; safe from
// any goroutine.
func (f *feed) accept(ctx context.Context, n *node.Node) error {
	i := f.n.Add(1)
	var fl cmb.Fields
	for j := range fl {
		fl[j].Text = fmt.Sprintf("record %d field %d: %s", i, j, strings.Repeat(fmt.Sprintf("w%d ", i*7+int64(j)), 300))
	}
	// Older than the records before it, as catch-up delivers them: the
	// cursor orders by acceptance, not by createdAt.
	rec, err := cmb.Build(cmb.Draft{Fields: fl, Group: "default", CreatedBy: f.peer.NodeID, CreatedAt: 1751000000000 - i}, f.peer.Ed25519)
	if err != nil {
		return err
	}
	c, err := n.Check(ctx, rec, node.Source{PeerID: "12D3KooWpeer", NodeID: f.peer.NodeID, AuthorKey: f.peer.PublicKeyB64(), Via: "catch-up"})
	if err != nil {
		return err
	}
	_, err = n.Accept(ctx, c)
	return err
}

func eventCursor(t *testing.T, m map[string]any) string {
	t.Helper()
	d, _ := m["data"].(map[string]any)
	c, _ := d["cursor"].(string)
	if m["event"] != "cmb-accepted" || c == "" {
		t.Fatalf("want a cmb-accepted event with a cursor, got %v", m)
	}
	return c
}

// A listener that stops reading is dropped; reconnecting with `after` the
// last cursor it read, it receives exactly the records it missed, in
// order and as they were published (less one forgotten since), then the
// live ones, none twice, while records keep arriving during the reconnect.
func TestDroppedListenerResumesAfterItsCursor(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.WriteQueue = 8; o.EventQueue = 64 })
	ctx := ctxT(t)
	f := newFeed(t)
	// What the node published, in order, read off the bus itself.
	all := ts.node.Events().Subscribe(1 << 16)
	defer all.Close()
	var published []node.AcceptedEvent
	readPublished := func(upTo int64) {
		for int64(len(published)) < upTo {
			select {
			case e := <-all.C:
				if a, ok := e.Data.(node.AcceptedEvent); ok {
					published = append(published, a)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("bus delivered %d of %d accepted events", len(published), upTo)
			}
		}
	}

	stalled := dialRaw(t, ts.path)
	m := stalled.call(`{"type":"listen"}`)
	wantResult(t, m, "listen")
	if c, _ := m["cursor"].(string); !strings.HasSuffix(c, ".0") {
		t.Fatalf("listen reply on an empty node: %v", m)
	}
	for range 3 {
		if err := f.accept(ctx, ts.node); err != nil {
			t.Fatal(err)
		}
	}
	var last string
	for range 3 {
		last = eventCursor(t, stalled.recv())
	}
	// It reads no more: records pile up until it is dropped.
	for ts.srv.Stats().Dropped == 0 {
		if f.n.Load() > 5000 {
			t.Fatal("a listener that stopped reading was never dropped")
		}
		if err := f.accept(ctx, ts.node); err != nil {
			t.Fatal(err)
		}
	}
	missedBefore := f.n.Load() - 3
	readPublished(f.n.Load())
	if published[2].Cursor != last {
		t.Fatalf("last cursor read %s, but the third record published was %s", last, published[2].Cursor)
	}
	forgotten := published[4].Key
	if _, err := ts.node.Forget(ctx, forgotten); err != nil {
		t.Fatal(err)
	}

	// Records keep arriving while it reconnects: 20 before it dials, the
	// rest while it subscribes and reads its replay. They stay under the
	// event queue's 64 (a slow machine can have the writer still on the
	// replay when every live one is queued), which a burst past it would
	// rightly overflow: the drop of a listener that does read is the
	// queue's size, and this test is about the resume.
	const during = 40
	fed := make(chan error, 1)
	go func() {
		for range during {
			if err := f.accept(ctx, ts.node); err != nil {
				fed <- err
				return
			}
		}
		fed <- nil
	}()
	for f.n.Load() < missedBefore+3+20 {
		time.Sleep(time.Millisecond)
	}
	c := dialClient(t, ts.path)
	if _, err := c.ListenAfter(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	if err := f.accept(ctx, ts.node); err != nil { // one more, after it all
		t.Fatal(err)
	}
	readPublished(f.n.Load())

	var want []node.AcceptedEvent
	for _, e := range published[3:] {
		if e.Key != forgotten {
			want = append(want, e)
		}
	}
	for i, w := range want {
		var ev Event
		select {
		case ev = <-c.Events():
		case <-time.After(30 * time.Second):
			t.Fatalf("resumed listener got %d of %d events", i, len(want))
		}
		wb, _ := json.Marshal(w)
		if ev.Event != "cmb-accepted" || ev.Cursor != w.Cursor || string(ev.Data) != string(wb) {
			t.Fatalf("resumed event %d of %d (missed %d, %d during the reconnect):\ngot  %s %s %.200s\nwant %s %.200s",
				i, len(want), missedBefore, during, ev.Event, ev.Cursor, ev.Data, w.Cursor, wb)
		}
	}
	select {
	case ev := <-c.Events():
		t.Fatalf("an event past the last record: %s %.200s", ev.Cursor, ev.Data)
	case <-time.After(200 * time.Millisecond):
	}
	if c.EventsDropped() != 0 {
		t.Fatalf("the client dropped %d events", c.EventsDropped())
	}
}

// Cursors the daemon no longer numbers are refused cursor_expired with
// the fix in the message; malformed ones bad_request; the connection
// stays usable and resumes from a cursor still in the ring.
func TestListenAfterRefusesCursors(t *testing.T) {
	ts := startServerWith(t, node.Options{AcceptedRing: 4}, nil)
	ctx := ctxT(t)
	f := newFeed(t)
	sub := ts.node.Events().Subscribe(64)
	var cursors []string
	for range 6 {
		if err := f.accept(ctx, ts.node); err != nil {
			t.Fatal(err)
		}
		e := <-sub.C
		cursors = append(cursors, e.Data.(node.AcceptedEvent).Cursor)
	}
	sub.Close()
	boot, _, _ := strings.Cut(cursors[0], ".")
	other := strings.Repeat("0", len(boot))
	if other == boot {
		other = strings.Repeat("1", len(boot))
	}

	r := dialRaw(t, ts.path)
	for _, msg := range []string{
		`{"type":"listen","after":5}`, `{"type":"listen","after":null}`, `{"type":"listen","after":""}`,
		`{"type":"listen","after":"nope"}`, `{"type":"listen","after":"` + boot + `.99"}`,
	} {
		wantError(t, r.call(msg), CodeBadRequest)
	}
	m := r.call(`{"type":"listen","after":"` + cursors[0] + `"}`)
	wantError(t, m, CodeCursorExpired)
	if s := m["message"].(string); !strings.Contains(s, "4 records") || !strings.Contains(s, "`export` or `recent`") || !strings.Contains(s, "`listen` without `after`") {
		t.Fatalf("too-old cursor: %s", s)
	}
	m = r.call(`{"type":"listen","after":"` + other + `.3"}`)
	wantError(t, m, CodeCursorExpired)
	if s := m["message"].(string); !strings.Contains(s, "another run") || !strings.Contains(s, "`export` or `recent`") {
		t.Fatalf("other boot's cursor: %s", s)
	}
	if ts.node.Events().Subscribers() != 0 {
		t.Fatal("a refused listen subscribed")
	}

	// The oldest cursor still usable: the four records after it.
	m = r.call(`{"type":"listen","after":"` + cursors[1] + `"}`)
	wantResult(t, m, "listen")
	if m["cursor"] != cursors[5] {
		t.Fatalf("listen reply cursor %v, want the head %s", m["cursor"], cursors[5])
	}
	for _, want := range cursors[2:] {
		if got := eventCursor(t, r.recv()); got != want {
			t.Fatalf("replayed %s, want %s", got, want)
		}
	}
	wantError(t, r.call(`{"type":"listen","after":"`+cursors[5]+`"}`), CodeBadRequest) // already listening
	wantResult(t, r.call(`{"type":"listen"}`), "listen")
	ts.node.Events().Publish(events.Event{Name: events.PeerLeft, Data: map[string]string{"nodeId": "n"}})
	if m := r.recv(); m["event"] != "peer-left" {
		t.Fatalf("after the replay: %v", m)
	}

	c := dialClient(t, ts.path)
	_, err := c.ListenAfter(ctx, cursors[0])
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeCursorExpired {
		t.Fatalf("client ListenAfter a too-old cursor: %v", err)
	}
	head, err := c.ListenAfter(ctx, "")
	if err != nil || head != cursors[5] {
		t.Fatalf("client ListenAfter(\"\"): %q %v", head, err)
	}
}
