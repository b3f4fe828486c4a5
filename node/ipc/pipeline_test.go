package ipc

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cmbnode/node"
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
