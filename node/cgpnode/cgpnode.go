// Package cgpnode adapts the node to the Context Graph Protocol (node/cgp):
// the backend and engine over the node's records, the daemon socket's
// `query`/`verify` handler, the HTTP binding and its bearer token, and the
// remote that the `cmbnode cgp` stdio shim relays through.
package cgpnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// Name is the provider name every binding acknowledges; attestations commit
// to it, so the shim and the daemon must agree.
const Name = "cmbnode"

// Config builds the engine configuration for a node (or, with a nil node,
// for the shim's ack: same name, same attester key).
func Config(n *node.Node, id *identity.Identity, version string, log *slog.Logger) cgp.Config {
	c := cgp.Config{ProviderName: Name, ProviderVersion: version, Logger: log}
	if id != nil {
		c.SigningKey = id.Ed25519
	}
	if n != nil {
		c.Backend = NewBackend(n)
		c.Group = n.Group()
		// With a dense encoder, hosts of the same kernel may send query
		// embeddings (CGP E1); without one they are refused.
		if k, ok := n.EmbeddingsKernel(); ok {
			c.EmbeddingsFingerprint, c.EmbeddingDim = k.Fingerprint, k.Dim
		}
	}
	return c
}

// NewEngine returns the engine serving n's store, signing with n's key.
func NewEngine(n *node.Node, version string, log *slog.Logger) (*cgp.Engine, error) {
	e, err := cgp.NewEngine(Config(n, n.Identity(), version, log))
	if err != nil {
		return nil, fmt.Errorf("start CGP engine: %w", err)
	}
	return e, nil
}

// SocketHandler answers the daemon socket's query and verify requests with
// the engine, keeping CGP error codes intact for the shim to relay.
type SocketHandler struct{ Engine *cgp.Engine }

var _ ipc.CGPHandler = SocketHandler{}

// socketResultBytes is the frames' budget of a result sent over the
// socket: one socket message (ipc.MaxMessage) less room for the reply's
// envelope and the result attestation, so a large result reaches the
// `cmbnode cgp` shim truncated (and saying so) instead of as too_large.
const socketResultBytes = ipc.MaxMessage - 64<<10

// Query implements ipc.CGPHandler.
func (h SocketHandler) Query(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	q, err := cgp.DecodeQuery(raw)
	if err != nil {
		return nil, socketErr(err)
	}
	res, err := h.Engine.QueryWithin(ctx, q, socketResultBytes)
	if err != nil {
		return nil, socketErr(err)
	}
	return json.Marshal(res)
}

// Verify implements ipc.CGPHandler.
func (h SocketHandler) Verify(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	req, err := cgp.DecodeVerifyRequest(raw)
	if err != nil {
		return nil, socketErr(err)
	}
	resp, err := h.Engine.Verify(ctx, req)
	if err != nil {
		return nil, socketErr(err)
	}
	return json.Marshal(resp)
}

func socketErr(err error) error {
	var pe *cgp.Error
	if errors.As(err, &pe) {
		return &ipc.Error{Code: pe.Code, Message: pe.Message}
	}
	return err
}

// StartHTTP serves the CGP HTTP binding at addr until ctx ends or the
// returned closer is closed, answering only requests that carry token as
// their bearer token (see LoadOrCreateToken) and come from a loopback client
// that is not a web page (cgp.NewHTTPHandler). A non-loopback address is
// refused: CGP requires TLS off the machine (C7), which this binding does not
// terminate; so only loopback Host names need answering. A token that fails
// cgp.CheckBearerToken is refused before anything listens.
func StartHTTP(ctx context.Context, e *cgp.Engine, addr, token string, log *slog.Logger) (io.Closer, error) {
	if err := cgp.CheckBearerToken(token); err != nil {
		return nil, fmt.Errorf("CGP HTTP binding: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("CGP HTTP binding: listen on %s: %w", addr, err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("CGP HTTP binding: %s is not a loopback address; CGP needs TLS off the machine, so bind 127.0.0.1 or [::1]", addr)
	}
	srv := cgp.NewHTTPServer(addr, cgp.NewHTTPHandler(e, cgp.HTTPOptions{Logger: log, BearerToken: token}))
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("CGP HTTP binding stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("CGP HTTP binding ready", "url", "http://"+ln.Addr().String()+"/")
	return closerFunc(func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// SocketRemote is the shim's cgp.Remote: one connection to the daemon
// socket, dialled on first use and again after it breaks, so a host that
// starts the shim before the daemon gets answers once the daemon is up.
type SocketRemote struct {
	Path string

	mu sync.Mutex
	c  *ipc.Client
}

var _ cgp.Remote = (*SocketRemote)(nil)

func (r *SocketRemote) client(ctx context.Context) (*ipc.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		return r.c, nil
	}
	c, err := ipc.Dial(ctx, r.Path)
	if err != nil {
		return nil, err
	}
	r.c = c
	return c, nil
}

func (r *SocketRemote) drop(c *ipc.Client) {
	r.mu.Lock()
	if r.c == c {
		r.c = nil
	}
	r.mu.Unlock()
	c.Close()
}

func (r *SocketRemote) call(ctx context.Context, f func(*ipc.Client) (json.RawMessage, error)) (json.RawMessage, error) {
	for attempt := 0; ; attempt++ {
		c, err := r.client(ctx)
		if err != nil {
			return nil, err
		}
		out, err := f(c)
		var ie *ipc.Error
		switch {
		case err == nil:
			return out, nil
		case errors.As(err, &ie):
			// The daemon answered: its code is the answer.
			return nil, &cgp.Error{Code: ie.Code, Message: ie.Message}
		case ctx.Err() != nil:
			return nil, err
		}
		// The connection broke (daemon restarted?): redial once.
		r.drop(c)
		if attempt > 0 {
			return nil, err
		}
	}
}

// Query implements cgp.Remote.
func (r *SocketRemote) Query(ctx context.Context, q json.RawMessage) (json.RawMessage, error) {
	return r.call(ctx, func(c *ipc.Client) (json.RawMessage, error) { return c.Query(ctx, q) })
}

// Verify implements cgp.Remote.
func (r *SocketRemote) Verify(ctx context.Context, req json.RawMessage) (json.RawMessage, error) {
	return r.call(ctx, func(c *ipc.Client) (json.RawMessage, error) { return c.Verify(ctx, req) })
}

// Close closes the connection if one is open.
func (r *SocketRemote) Close() error {
	r.mu.Lock()
	c := r.c
	r.c = nil
	r.mu.Unlock()
	if c != nil {
		return c.Close()
	}
	return nil
}

// ServeStdio runs the `cmbnode cgp` shim for home: the handshake is
// answered here, queries and verifies go to the daemon at socket. It opens
// no network connection. The identity only supplies the attester key for
// the handshake; without a readable one the shim still answers (publishing
// no key), and queries report the missing daemon.
func ServeStdio(ctx context.Context, stdin io.Reader, stdout io.Writer, home, socket, version string, log *slog.Logger) error {
	id, err := identity.Load(home)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("identity unreadable; the handshake will publish no attester key", "err", err)
		}
		id = nil
	}
	cfg := Config(nil, id, version, log)
	// The daemon answers the queries, so the shim declares the daemon's
	// dense kernel: hosts of that kernel may send query embeddings. Asked
	// once at start; a daemon started later with another encoder refuses
	// embeddings it cannot read, so a stale ack costs an error, never a
	// wrong comparison.
	if d := daemonDense(ctx, socket); d != nil {
		cfg.EmbeddingsFingerprint, cfg.EmbeddingDim = d.Fingerprint, d.Dim
	}
	ack, err := cgp.AckFor(cfg)
	if err != nil {
		return fmt.Errorf("build CGP handshake: %w", err)
	}
	remote := &SocketRemote{Path: socket}
	defer remote.Close()
	h := &cgp.RelayHandler{AckInfo: ack, Remote: remote, Socket: socket}
	return cgp.Serve(ctx, stdin, stdout, h, cgp.ServeOptions{Logger: log})
}

// daemonDense is the dense encoder of the daemon at socket, or nil when it
// has none or does not answer within a few seconds.
func daemonDense(ctx context.Context, socket string) *node.DenseStatus {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := ipc.StatusAt(ctx, socket)
	if err != nil {
		return nil
	}
	return st.Dense
}
