package ipc

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/events"
)

func netListenUnixNoUnlink(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// Fifty clients remember at once, some pipelining on one connection; every
// record is stored once and readable, and every reply reaches its caller.
func TestFiftyConcurrentClients(t *testing.T) {
	ts := startServer(t, nil)
	ctx := ctxT(t)
	const clients, each = 50, 8
	keys := make([][]string, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(ctx, ts.path)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			// Overlapping calls on one connection: replies match by id.
			var mu sync.Mutex
			var inner sync.WaitGroup
			for j := range each {
				inner.Add(1)
				go func() {
					defer inner.Done()
					focus := fmt.Sprintf("client %d note %d", i, j)
					res, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": focus}})
					if err != nil {
						errs <- err
						return
					}
					g, err := c.Get(ctx, res.Key)
					if err != nil || !strings.Contains(string(g.CMB), focus) {
						errs <- fmt.Errorf("get %s after remember of %q: %s %v", res.Key, focus, g.CMB, err)
						return
					}
					mu.Lock()
					keys[i] = append(keys[i], res.Key)
					mu.Unlock()
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ks := range keys {
		for _, k := range ks {
			if seen[k] {
				t.Fatalf("key %s returned twice", k)
			}
			seen[k] = true
		}
	}
	if len(seen) != clients*each || ts.node.Status().CMBs != clients*each {
		t.Fatalf("%d keys, %d stored; want %d", len(seen), ts.node.Status().CMBs, clients*each)
	}
}

// A listener that never reads is dropped once its bounded queue fills,
// while a reading listener gets every event and other clients carry on.
func TestListenerThatNeverReads(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.WriteQueue = 8; o.EventQueue = 64 })
	ctx := ctxT(t)

	stalled := dialRaw(t, ts.path)
	stalled.send(`{"type":"listen"}`) // and never read again

	good := dialClient(t, ts.path)
	if err := good.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two subscribers", func() bool { return ts.node.Events().Subscribers() == 2 })

	const n = 400
	payload := strings.Repeat("p", 16<<10) // 400 × 16 KiB: far beyond any socket buffer
	var got atomic.Int64
	received := make(chan struct{})
	go func() {
		defer close(received)
		for ev := range good.Events() {
			if ev.Event != "peer-joined" {
				continue
			}
			if !strings.HasPrefix(string(ev.Data), fmt.Sprintf(`{"seq":%d,`, got.Load())) {
				t.Errorf("event %d out of order: %.40s", got.Load(), ev.Data)
			}
			if got.Add(1) == n {
				return
			}
		}
	}()
	worker := dialClient(t, ts.path)
	for i := range n {
		ts.node.Events().Publish(events.Event{Name: events.PeerJoined, Data: seqEvent{Seq: i, Pad: payload}})
		if i%32 == 31 {
			// Pace the publisher by the reading listener, as real traffic
			// would be, so only the stalled one can fall behind.
			waitFor(t, "the reading listener to catch up", func() bool { return got.Load() == int64(i+1) })
			if _, err := worker.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprint("while stalled ", i)}}); err != nil {
				t.Fatalf("remember while a listener stalls: %v", err)
			}
		}
	}
	<-received
	if got.Load() != n {
		t.Fatalf("reading listener got %d of %d events", got.Load(), n)
	}
	waitFor(t, "the stalled listener to be dropped", func() bool { return ts.srv.Stats().Dropped >= 1 })
	if d := ts.srv.Stats().Dropped; d != 1 {
		t.Fatalf("%d clients dropped, want only the stalled one", d)
	}
	if good.EventsDropped() != 0 {
		t.Fatalf("reading client dropped %d events", good.EventsDropped())
	}
	st, err := worker.Status(ctx)
	if err != nil || st.SocketClientsDropped != 1 {
		t.Fatalf("status after the drop: %+v %v", st, err)
	}
}

type seqEvent struct {
	Seq int    `json:"seq"`
	Pad string `json:"pad"`
}

// A client that sends requests but never reads the replies is dropped too.
func TestClientThatNeverReadsReplies(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.WriteQueue = 4 })
	r := dialRaw(t, ts.path)
	msg := []byte(strings.Repeat(`{"type":"status"}`+"\n", 200))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			r.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := r.c.Write(msg); err != nil {
				return // dropped: writes fail
			}
		}
	}()
	waitFor(t, "the client to be dropped", func() bool { return ts.srv.Stats().Dropped == 1 })
	<-done
	c := dialClient(t, ts.path)
	if _, err := c.Status(ctxT(t)); err != nil {
		t.Fatalf("server unusable after dropping a client: %v", err)
	}
}

// A half-sent message is given MessageTimeout, then the connection goes;
// an idle listener is never timed out.
func TestTimeouts(t *testing.T) {
	ts := startServer(t, func(o *Options) { o.MessageTimeout = 150 * time.Millisecond })
	half := dialRaw(t, ts.path)
	half.sendRaw([]byte(`{"type":"sta`))

	idle := dialRaw(t, ts.path)
	wantResult(t, idle.call(`{"type":"listen"}`), "listen")

	waitFor(t, "the half-sent client to be closed", func() bool { return ts.srv.Stats().Clients == 1 })
	if _, err := half.tryRecv(5 * time.Second); err == nil {
		t.Fatal("half-sent client got a message instead of a close")
	}
	time.Sleep(300 * time.Millisecond) // well past MessageTimeout
	ts.node.Events().Publish(events.Event{Name: events.PeerLeft, Data: map[string]string{"nodeId": "n"}})
	if m := idle.recv(); m["event"] != "peer-left" {
		t.Fatalf("idle listener: %v", m)
	}
	// A request sent slowly but completely within the limit is served.
	idle.sendRaw([]byte(`{"type":`))
	time.Sleep(20 * time.Millisecond)
	idle.sendRaw([]byte(`"status"}` + "\n"))
	wantResult(t, idle.recv(), "status")
}

// Stopping the server lets requests in flight finish and answers them.
func TestServeDrainsOnStop(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprint("draining ", i)}})
			results <- err
		}()
	}
	time.Sleep(5 * time.Millisecond)
	ts.srv.Close()
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		if err == nil {
			ok++
		}
	}
	// Each remember either got its reply or never reached the server;
	// whatever was answered is stored.
	if ts.node.Status().CMBs < ok {
		t.Fatalf("%d remembers answered but only %d stored", ok, ts.node.Status().CMBs)
	}
	<-c.Done()
}

// A listener that goes away is forgotten at once, not at the next event.
func TestDepartedListenerIsForgotten(t *testing.T) {
	ts := startServer(t, nil)
	for range 5 {
		r := dialRaw(t, ts.path)
		wantResult(t, r.call(`{"type":"listen"}`), "listen")
		r.c.Close()
	}
	waitFor(t, "departed listeners to be forgotten", func() bool {
		return ts.node.Events().Subscribers() == 0 && ts.srv.Stats().Clients == 0
	})
}

// A one-shot client that sends and then shuts its sending side (what
// `nc -N` and socat do at the end of stdin) still gets every reply.
func TestHalfCloseGetsReplies(t *testing.T) {
	ts := startServer(t, nil)
	r := dialRaw(t, ts.path)
	r.sendRaw([]byte(`{"type":"remember","id":1,"fields":{"focus":"one shot"}}` + "\n" + `{"type":"status","id":2}` + "\n"))
	if err := r.c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got := map[any]string{}
	for range 2 {
		m := r.recv()
		got[m["id"]] = m["action"].(string)
	}
	if got[float64(1)] != "remember" || got[float64(2)] != "status" {
		t.Fatalf("replies after half-close: %v", got)
	}
	if _, err := r.tryRecv(30 * time.Second); err == nil {
		t.Fatal("connection not closed after the replies")
	}
}

// TestRepliesStayWholeAndInOrderPastAFullSocket: a client that sends a
// burst and reads nothing for a while fills its socket, so its replies
// go out first written directly, then in part, then from the queue; once
// it reads, it gets every reply whole and in request order (id-less
// requests, with a malformed line every 50th whose error reply has its
// place), in both framings.
func TestRepliesStayWholeAndInOrderPastAFullSocket(t *testing.T) {
	for _, framed := range []bool{false, true} {
		t.Run(fmt.Sprintf("framed=%v", framed), func(t *testing.T) {
			ts := startServer(t, nil)
			r := dialRaw(t, ts.path)
			r.framed = framed
			const n = 3000
			go func() {
				for i := range n {
					if i%50 == 49 {
						r.send(`{oops`)
					} else {
						r.send(`{"type":"status"}`)
					}
				}
			}()
			time.Sleep(300 * time.Millisecond) // replies pile up unread
			for i := range n {
				m := r.recv()
				if i%50 == 49 {
					if m["type"] != "error" || m["code"] != CodeBadRequest {
						t.Fatalf("reply %d should be the malformed line's error: %v", i, m)
					}
				} else if m["type"] != "result" || m["action"] != "status" {
					t.Fatalf("reply %d should be a status: %v", i, m)
				}
			}
		})
	}
}
