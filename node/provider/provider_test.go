package provider

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"cmbnode/node"
	"cmbnode/node/cgp"
	"cmbnode/node/identity"
	"cmbnode/node/ipc"
)

func openNode(t *testing.T, home string) *node.Node {
	t.Helper()
	id, _, err := identity.LoadOrCreate(home, "prov")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serve runs an IPC server for n with the CGP socket handler until cancel.
func serve(t *testing.T, n *node.Node, sock string) (stop func()) {
	t.Helper()
	eng, err := NewEngine(n, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ipc.Listen(ipc.Options{Path: sock, Node: n, CGP: SocketHandler{Engine: eng}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	return func() { cancel(); <-done }
}

func TestSocketRemoteRedialsAndKeepsCodes(t *testing.T) {
	home := t.TempDir()
	sock := filepath.Join(home, "daemon.sock")
	n := openNode(t, home)
	defer n.Close()
	ctx := context.Background()

	r := &SocketRemote{Path: sock}
	defer r.Close()
	// No daemon yet: a plain error (the relay turns it into `unavailable`).
	if _, err := r.Query(ctx, []byte(`{"goal":"x","max_frames":1,"max_tokens":10}`)); err == nil || errors.As(err, new(*cgp.Error)) {
		t.Fatalf("no daemon: %v", err)
	}
	stop := serve(t, n, sock)
	out, err := r.Query(ctx, []byte(`{"goal":"x","max_frames":1,"max_tokens":10}`))
	if err != nil || !strings.Contains(string(out), `"frames":[]`) {
		t.Fatalf("query: %s %v", out, err)
	}
	// A CGP-level refusal keeps its code across the socket.
	_, err = r.Query(ctx, []byte(`{"goal":"x","max_frames":1,"max_tokens":10,"embedding":[0.1]}`))
	var pe *cgp.Error
	if !errors.As(err, &pe) || pe.Code != cgp.CodeBadRequest {
		t.Fatalf("embedding: %v", err)
	}
	// The daemon restarts: the same remote reconnects.
	stop()
	stop = serve(t, n, sock)
	defer stop()
	if _, err := r.Verify(ctx, []byte(`{"frames":[]}`)); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestStartHTTPRefusesNonLoopback(t *testing.T) {
	home := t.TempDir()
	n := openNode(t, home)
	defer n.Close()
	eng, err := NewEngine(n, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// 0.0.0.0 would expose the provider off the machine without TLS.
	if c, err := StartHTTP(context.Background(), eng, "0.0.0.0:0", slog.New(slog.DiscardHandler)); err == nil {
		c.Close()
		t.Fatal("wildcard address accepted")
	}
	c, err := StartHTTP(context.Background(), eng, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
