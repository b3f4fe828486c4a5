package ipc

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

// gateNode is a node whose Remember, once called, waits (up to a
// second) for a second Remember to be running too: with requests handled
// one at a time that never happens, so each waits out the second.
type gateNode struct {
	Node
	in, most atomic.Int32
}

func (g *gateNode) Remember(ctx context.Context, in node.RememberInput) (node.Result, error) {
	n := g.in.Add(1)
	defer g.in.Add(-1)
	for {
		if m := g.most.Load(); n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	for deadline := time.Now().Add(time.Second); g.most.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return g.Node.Remember(ctx, in)
}

// TestIdlessRemembersArePipelined: a client that sends remembers without
// ids, back to back, has them run together (so they share commits), and
// still gets every reply in request order; a malformed line and a status
// after them are answered after them, in their places.
func TestIdlessRemembersArePipelined(t *testing.T) {
	var g *gateNode
	ts := startServer(t, func(o *Options) {
		g = &gateNode{Node: o.Node}
		o.Node = g
	})
	c := dialRaw(t, ts.path)
	const n = 12
	var batch []byte
	for i := range n {
		batch = fmt.Appendf(batch, `{"type":"remember","fields":{"focus":"pipelined %d"}}`+"\n", i)
		if i == n/2 {
			batch = append(batch, "{oops\n"...)
		}
	}
	batch = append(batch, `{"type":"status"}`+"\n"...)
	c.sendRaw(batch)
	var keys []string
	for i := range n {
		m := c.recv()
		if m["action"] != "remember" || m["type"] != "result" {
			t.Fatalf("reply %d: %v", i, m)
		}
		keys = append(keys, m["key"].(string))
		if i == n/2 {
			if m := c.recv(); m["type"] != "error" || m["code"] != CodeBadRequest {
				t.Fatalf("the malformed line's reply, after remember %d: %v", i, m)
			}
		}
	}
	if m := c.recv(); m["action"] != "status" || m["cmbs"] != float64(n) {
		t.Fatalf("status after the remembers: %v", m)
	}
	for i, k := range keys {
		s, err := ts.node.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Record.Fields[0].Text, fmt.Sprintf("pipelined %d", i); got != want {
			t.Fatalf("reply %d names the record of %q", i, got)
		}
	}
	if g.most.Load() < 2 {
		t.Fatalf("id-less remembers ran one at a time")
	}
}

// TestReadingListenerKeepsUpWithBursts: a listener that reads steadily is
// not dropped when events come in bursts far faster than one write per
// event (here 4,000 at once, a couple of seconds of a busy mesh), and
// gets every event in order.
func TestReadingListenerKeepsUpWithBursts(t *testing.T) {
	ts := startServer(t, nil)
	c := dialRaw(t, ts.path)
	if m := c.call(`{"type":"listen"}`); m["status"] != "subscribed" {
		t.Fatalf("listen: %v", m)
	}
	const bursts, burst = 5, 4000
	pad := strings.Repeat("r", 2100) // a standard CMB's texts
	got := make(chan int, bursts*burst)
	go func() {
		for {
			m, err := c.tryRecv(30 * time.Second)
			if err != nil {
				close(got)
				return
			}
			if d, ok := m["data"].(map[string]any); ok {
				got <- int(d["seq"].(float64))
			}
		}
	}()
	next := 0
	for b := range bursts {
		for i := range burst {
			ts.node.Events().Publish(events.Event{Name: events.CMBAccepted, Data: seqEvent{Seq: b*burst + i, Pad: pad}})
		}
		for next < (b+1)*burst {
			seq, ok := <-got
			if !ok {
				t.Fatalf("listener dropped after %d of %d events (socket drops %d, bus drops %d)", next, bursts*burst, ts.srv.Stats().Dropped, ts.node.Events().Dropped())
			}
			if seq != next {
				t.Fatalf("event %d arrived as %d", next, seq)
			}
			next++
		}
	}
	if d := ts.srv.Stats().Dropped + ts.node.Events().Dropped(); d != 0 {
		t.Fatalf("%d drops", d)
	}
}
