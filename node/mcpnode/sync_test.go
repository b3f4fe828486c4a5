package mcpnode

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// syncingMesh is a mesh with no peers that reports a catch-up in progress.
type syncingMesh struct {
	p atomic.Pointer[node.SyncProgress]
}

func (m *syncingMesh) Publish(context.Context, *cmb.Record, []byte) error { return nil }
func (m *syncingMesh) Peers() []node.PeerInfo                             { return nil }
func (m *syncingMesh) PeerID() string                                     { return "12D3KooWfake" }
func (m *syncingMesh) Addrs() []string                                    { return nil }
func (m *syncingMesh) Sync() node.SyncProgress {
	if p := m.p.Load(); p != nil {
		return *p
	}
	return node.SyncProgress{}
}

// A recall answered while the node is still catching up says so, in the
// structured result and in the text a model reads, from the socket's own
// recall reply.
func TestRecallWhileSyncingSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mesh := &syncingMesh{}
	n, cs := relayedNode(t, ctx, "mcp-sync", mesh)
	var f cmb.Fields
	f[cmb.Focus].Text = "release plan drafted"
	if _, err := n.Remember(ctx, node.RememberInput{Fields: f}); err != nil {
		t.Fatal(err)
	}
	recall := func() (RecallOut, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "recall", Arguments: map[string]any{"query": "release"}})
		if err != nil || res.IsError {
			t.Fatalf("recall: %v %+v", err, res)
		}
		var out RecallOut
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out, res.Content[0].(*mcp.TextContent).Text
	}

	out, text := recall()
	if out.Syncing != nil || strings.Contains(text, "catching up") || len(out.Results) != 1 {
		t.Fatalf("not syncing: %+v\n%s", out, text)
	}
	mesh.p.Store(&node.SyncProgress{Syncing: true, Received: 120, Expected: 3000, Peers: 2})
	out, text = recall()
	if out.Syncing == nil || *out.Syncing != (Syncing{Received: 120, Expected: 3000, Peers: 2}) || len(out.Results) != 1 {
		t.Fatalf("syncing: %+v", out)
	}
	if !strings.HasPrefix(text, "Note: still catching up with 2 peers (120 of about 3000 memories received)") {
		t.Fatalf("syncing text: %s", text)
	}
}

// relayedNode opens a node named name with mesh attached, serves it on a
// socket and connects an MCP client, over pipes, to a relay (Serve) on that
// socket. Cleanup closes the client, then stops the servers, then the node.
func relayedNode(t *testing.T, ctx context.Context, name string, mesh node.Mesh) (*node.Node, *mcp.ClientSession) {
	t.Helper()
	home := t.TempDir()
	id, err := identity.Create(home, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "default", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.AttachMesh(mesh)
	sock := filepath.Join(home, "daemon.sock")
	srv, err := ipc.Listen(ipc.Options{Path: sock, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	t.Cleanup(func() { stop(); <-served })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	go Serve(sctx, sr, sw, Options{Socket: sock, Home: home, Logger: slog.New(slog.DiscardHandler)})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return n, cs
}
