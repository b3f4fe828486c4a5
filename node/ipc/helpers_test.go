package ipc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
)

// testServer is a node and its socket in a temporary home.
type testServer struct {
	srv  *Server
	node *node.Node
	path string
	home string
}

func startServer(t testing.TB, tune func(*Options)) *testServer {
	t.Helper()
	return startServerWith(t, node.Options{}, tune)
}

// startServerWith is startServer with the node's options (Home, Group
// and Identity are set here).
func startServerWith(t testing.TB, nopts node.Options, tune func(*Options)) *testServer {
	t.Helper()
	home := t.TempDir()
	id, err := identity.Create(home, "ipc-test", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	nopts.Home, nopts.Group, nopts.Identity = home, "default", id
	n, err := node.Open(nopts)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Path: filepath.Join(home, "daemon.sock"), Node: n}
	if tune != nil {
		tune(&opts)
	}
	srv, err := Listen(opts)
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		n.Close()
	})
	return &testServer{srv: srv, node: n, path: opts.Path, home: home}
}

// rawConn speaks the protocol by hand, as an agent would.
type rawConn struct {
	t      testing.TB
	c      net.Conn
	br     *bufio.Reader
	framed bool
}

func dialRaw(t testing.TB, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReaderSize(c, 2<<20)}
}

func (r *rawConn) sendRaw(b []byte) {
	r.t.Helper()
	r.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// send writes one message in the connection's framing.
func (r *rawConn) send(msg string) {
	r.t.Helper()
	if r.framed {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
		r.sendRaw(append(b, msg...))
		return
	}
	r.sendRaw([]byte(msg + "\n"))
}

// recv reads one message. The deadline only keeps a broken server from
// hanging the test; no assertion depends on timing.
func (r *rawConn) recv() map[string]any {
	r.t.Helper()
	m, err := r.tryRecv(30 * time.Second)
	if err != nil {
		r.t.Fatalf("read reply: %v", err)
	}
	return m
}

func (r *rawConn) tryRecv(d time.Duration) (map[string]any, error) {
	r.c.SetReadDeadline(time.Now().Add(d))
	var b []byte
	if r.framed {
		var hdr [4]byte
		if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
			return nil, err
		}
		b = make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r.br, b); err != nil {
			return nil, err
		}
	} else {
		line, err := r.br.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		b = line
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.New("reply is not JSON: " + string(b))
	}
	return m, nil
}

// call sends msg and returns the next message.
func (r *rawConn) call(msg string) map[string]any {
	r.t.Helper()
	r.send(msg)
	return r.recv()
}

func wantResult(t testing.TB, m map[string]any, action string) {
	t.Helper()
	if m["type"] != "result" || m["action"] != action {
		t.Fatalf("want a %s result, got %v", action, m)
	}
}

func wantError(t testing.TB, m map[string]any, code string) {
	t.Helper()
	if m["type"] != "error" || m["code"] != code {
		t.Fatalf("want error %s, got %v", code, m)
	}
	if s, _ := m["message"].(string); s == "" {
		t.Fatalf("error %s has no message: %v", code, m)
	}
}

func dialClient(t testing.TB, path string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond; the limit only bounds a failing test.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("gave up waiting: %s", what)
}
