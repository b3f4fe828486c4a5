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
	home := t.TempDir()
	id, err := identity.Create(home, "mcp-sync", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "default", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	mesh := &syncingMesh{}
	n.AttachMesh(mesh)
	sock := filepath.Join(home, "daemon.sock")
	srv, err := ipc.Listen(ipc.Options{Path: sock, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	var f cmb.Fields
	f[cmb.Focus].Text = "release plan drafted"
	if _, err := n.Remember(ctx, node.RememberInput{Fields: f}); err != nil {
		t.Fatal(err)
	}

	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	go Serve(ctx, sr, sw, Options{Socket: sock, Home: home, Logger: slog.New(slog.DiscardHandler)})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
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
