package ipc

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/events"
)

// heldCGP answers queries only once release is closed, so a test can keep
// a request in flight as long as it likes.
type heldCGP struct {
	started chan struct{}
	release chan struct{}
}

func newHeldCGP() *heldCGP {
	return &heldCGP{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *heldCGP) Query(ctx context.Context, q json.RawMessage) (json.RawMessage, error) {
	h.started <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return json.RawMessage(`{"frames":[]}`), nil
}

func (h *heldCGP) Verify(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"verdicts":[]}`), nil
}

// closed reports whether the server closed r's connection (EOF rather
// than a message or a read timeout).
func closed(r *rawConn, within time.Duration) bool {
	_, err := r.tryRecv(within)
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// Issue #24: 1,024 connections that say nothing used to lock every agent
// out with `unavailable: too many clients`. Now a new client takes the
// place of the idlest silent one; a listener and a connection waiting
// for its reply keep theirs.
func TestSilentConnectionsDoNotLockAgentsOut(t *testing.T) {
	cgp := newHeldCGP()
	ts := startServer(t, func(o *Options) { o.CGP = cgp })
	max := DefaultOptions().MaxConns

	listener := dialRaw(t, ts.path)
	wantResult(t, listener.call(`{"type":"listen"}`), "listen")
	busy := dialRaw(t, ts.path)
	busy.send(`{"type":"query","id":"held","query":{}}`)
	<-cgp.started

	// The attack: more silent connections than the socket has room for.
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	for range max + 50 {
		c, err := net.Dial("unix", ts.path)
		if err != nil {
			t.Fatalf("dial silent connection %d: %v", len(silent), err)
		}
		silent = append(silent, c)
	}
	waitFor(t, "the socket to be full", func() bool {
		st := ts.srv.Stats()
		return st.Clients == int64(max) && st.Accepted >= int64(max+52)
	})

	// An honest agent is still served, and can write.
	c := dialClient(t, ts.path)
	if _, err := c.Status(ctxT(t)); err != nil {
		t.Fatalf("honest client during the attack: %v", err)
	}
	if _, err := c.Remember(ctxT(t), RememberArgs{Fields: map[string]any{"focus": "served while the socket is flooded"}}); err != nil {
		t.Fatalf("honest remember during the attack: %v", err)
	}
	st := ts.srv.Stats()
	if st.Evicted < 51 || st.Refused != 0 || st.Clients > int64(max) {
		t.Fatalf("stats after the attack: %+v; want at least 51 evicted, none refused, at most %d clients", st, max)
	}

	// The listener and the request in flight were not the ones closed.
	ts.node.Events().Publish(events.Event{Name: events.PeerJoined, Data: map[string]string{"nodeId": "n"}})
	if m := listener.recv(); m["event"] != "peer-joined" {
		t.Fatalf("listener after the attack: %v", m)
	}
	close(cgp.release)
	if m := busy.recv(); m["id"] != "held" {
		t.Fatalf("request in flight after the attack: %v", m)
	}
	wantResult(t, busy.call(`{"type":"status"}`), "status")
}

// Room is made from silent connections first (oldest first), then from
// those idle longest; never from a listener or a client waiting for a
// reply. With nothing to close, the new client is refused and counted.
func TestRoomIsMadeFromTheIdlest(t *testing.T) {
	cgp := newHeldCGP()
	defer close(cgp.release)
	ts := startServer(t, func(o *Options) { o.CGP = cgp; o.MaxConns = 4; o.MaxListeners = 4 })

	listener := dialRaw(t, ts.path)
	wantResult(t, listener.call(`{"type":"listen","id":1}`), "listen")
	busy := dialRaw(t, ts.path)
	busy.send(`{"type":"query","id":"held","query":{}}`)
	<-cgp.started
	spoke := dialRaw(t, ts.path)
	wantResult(t, spoke.call(`{"type":"status"}`), "status")
	quiet := dialRaw(t, ts.path)
	waitFor(t, "four clients", func() bool { return ts.srv.Stats().Clients == 4 })

	first := dialRaw(t, ts.path)
	wantResult(t, first.call(`{"type":"status"}`), "status")
	if !closed(quiet, 10*time.Second) {
		t.Fatal("the silent connection was not the one closed")
	}
	second := dialRaw(t, ts.path)
	wantResult(t, second.call(`{"type":"status"}`), "status")
	if !closed(spoke, 10*time.Second) {
		t.Fatal("the connection idle longest was not the one closed next")
	}
	wantResult(t, first.call(`{"type":"listen"}`), "listen")
	wantResult(t, second.call(`{"type":"listen"}`), "listen")

	refused := dialRaw(t, ts.path)
	wantError(t, refused.recv(), CodeUnavailable)
	if st := ts.srv.Stats(); st.Evicted != 2 || st.Refused != 1 {
		t.Fatalf("stats: %+v; want 2 evicted, 1 refused", st)
	}
	// Both still served (the status carries an id: the held query is
	// still running, and an id-less request would wait for it).
	wantResult(t, busy.call(`{"type":"status","id":2}`), "status")
	wantResult(t, listener.call(`{"type":"status"}`), "status")
}

// A connection that sends nothing is closed after HelloTimeout, one that
// went quiet after IdleTimeout; a listener (even one whose listen is
// still running when its wait starts) and a connection waiting for its
// reply are not, however long they wait.
func TestIdleTimeoutSparesListenersAndRequestsInFlight(t *testing.T) {
	cgp := newHeldCGP()
	// Long enough that the test, on a loaded machine, sends its status
	// right after the held reply before the connection counts as idle.
	const limit = 400 * time.Millisecond
	ts := startServer(t, func(o *Options) { o.CGP = cgp; o.HelloTimeout = limit; o.IdleTimeout = limit })

	listener := dialRaw(t, ts.path)
	listener.send(`{"type":"listen","id":1}`)
	busy := dialRaw(t, ts.path)
	busy.send(`{"type":"query","id":"held","query":{}}`)
	<-cgp.started
	wantResult(t, listener.recv(), "listen")
	silent := dialRaw(t, ts.path)
	quiet := dialRaw(t, ts.path)
	wantResult(t, quiet.call(`{"type":"status"}`), "status")

	if !closed(silent, 10*time.Second) || !closed(quiet, 10*time.Second) {
		t.Fatal("idle connections were not closed")
	}
	// Several more timeouts' worth, so the survivors have waited as long.
	time.Sleep(5 * limit)
	if st := ts.srv.Stats(); st.IdleClosed != 2 || st.Clients != 2 {
		t.Fatalf("stats: %+v; want 2 closed idle, 2 clients left", st)
	}
	ts.node.Events().Publish(events.Event{Name: events.PeerLeft, Data: map[string]string{"nodeId": "n"}})
	if m := listener.recv(); m["event"] != "peer-left" {
		t.Fatalf("listener after the idle timeout: %v", m)
	}
	close(cgp.release)
	if m := busy.recv(); m["id"] != "held" || m["type"] != "result" {
		t.Fatalf("request in flight across the idle timeout: %v", m)
	}
	wantResult(t, busy.call(`{"type":"status"}`), "status")
	// Once answered and quiet, it is idle like any other.
	if !closed(busy, 10*time.Second) {
		t.Fatal("the connection was not closed once idle")
	}
}

// Listeners are never closed to make room, so they are capped (at half
// of MaxConns by default): past the cap a listen is refused `unavailable`
// and counted, an ordinary client still gets a place, and a listener that
// leaves frees its slot.
func TestListenersCannotTakeEveryPlace(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MaxConns = 8 })
	var ls []*rawConn
	for range 4 {
		l := dialRaw(t, ts.path)
		wantResult(t, l.call(`{"type":"listen"}`), "listen")
		ls = append(ls, l)
	}
	extra := dialRaw(t, ts.path)
	wantError(t, extra.call(`{"type":"listen"}`), CodeUnavailable)
	if st := ts.srv.Stats(); st.Listeners != 4 || st.ListenRefused != 1 {
		t.Fatalf("stats %+v, want 4 listening and 1 refused", st)
	}
	// The refused client keeps its connection for other requests.
	wantResult(t, extra.call(`{"type":"status"}`), "status")
	for range 3 {
		c := dialRaw(t, ts.path)
		wantResult(t, c.call(`{"type":"status"}`), "status")
	}
	ls[0].c.Close()
	waitFor(t, "the listener's slot to free", func() bool { return ts.srv.Stats().Listeners == 3 })
	wantResult(t, extra.call(`{"type":"listen"}`), "listen")
}
