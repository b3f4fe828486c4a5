package cgpnode

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
)

const testToken = "provider-test-token-0123456789abcdef"

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
	if c, err := StartHTTP(context.Background(), eng, "0.0.0.0:0", testToken, slog.New(slog.DiscardHandler)); err == nil {
		c.Close()
		t.Fatal("wildcard address accepted")
	}
	c, err := StartHTTP(context.Background(), eng, "127.0.0.1:0", testToken, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCGPHTTPTokenFileIsMintedPrivate: the first start mints a token into
// a 0600 file in the home; later starts read the same token back.
func TestCGPHTTPTokenFileIsMintedPrivate(t *testing.T) {
	home := t.TempDir()
	tok, created, err := LoadOrCreateToken(home)
	if err != nil || !created {
		t.Fatalf("first start: %v created=%v", err, created)
	}
	if err := cgp.CheckBearerToken(tok); err != nil {
		t.Fatalf("minted token %v", err)
	}
	path := TokenPath(home)
	if path != filepath.Join(home, "cgp-http.token") {
		t.Fatalf("token path %s", path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	again, created, err := LoadOrCreateToken(home)
	if err != nil || created || again != tok {
		t.Fatalf("second start: %v created=%v same=%v", err, created, again == tok)
	}
	other, _, err := LoadOrCreateToken(t.TempDir())
	if err != nil || other == tok {
		t.Fatalf("another home got the same token (%v)", err)
	}
	entries, _ := os.ReadDir(home)
	if len(entries) != 1 {
		t.Fatalf("home holds %d entries after minting, want only the token file", len(entries))
	}
}

// TestCGPHTTPRefusesLooseTokenFile: a token others can read is no secret,
// so the daemon refuses it, as it refuses such an identity file.
func TestCGPHTTPRefusesLooseTokenFile(t *testing.T) {
	home := t.TempDir()
	tok, _, err := LoadOrCreateToken(home)
	if err != nil {
		t.Fatal(err)
	}
	path := TokenPath(home)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateToken(home)
		var te *TokenFileError
		if !errors.As(err, &te) || !errors.Is(err, ErrTokenInsecure) || te.Path != path || te.Mode != mode ||
			!strings.Contains(err.Error(), "chmod 600 "+path) || strings.Contains(err.Error(), tok) {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	// Unusable contents are refused, not replaced: the operator chose them.
	for name, body := range map[string]string{"empty": "", "short": "abc\n", "spaces": strings.Repeat("a b ", 10)} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateToken(home)
		if !errors.Is(err, ErrTokenInvalid) || !errors.Is(err, cgp.ErrBadToken) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s token file: %v", name, err)
		}
		if b, _ := os.ReadFile(path); string(b) != body {
			t.Errorf("%s token file was rewritten", name)
		}
	}
}

func TestStartHTTPRefusesNoToken(t *testing.T) {
	home := t.TempDir()
	n := openNode(t, home)
	defer n.Close()
	eng, err := NewEngine(n, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "short"} {
		if c, err := StartHTTP(context.Background(), eng, "127.0.0.1:0", tok, slog.New(slog.DiscardHandler)); !errors.Is(err, cgp.ErrBadToken) {
			if c != nil {
				c.Close()
			}
			t.Errorf("token %q: %v", tok, err)
		}
	}
}
