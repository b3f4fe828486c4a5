// Package mcpnode is `cmbnode mcp`: a Model Context Protocol server on
// stdio, built on the official Go SDK, that serves the node's memory to LLM
// hosts as tools (remember, recall, get, thread, recent, peers, status),
// resources (cmb://{key}, and cmbnode://recent with update notifications)
// and a prompt. Like `cmbnode cgp` it only talks to the daemon socket, so
// it never opens the network itself, and it redials when the daemon
// restarts.
package mcpnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// Name is the server name hosts see.
const Name = "cmbnode"

// Options configure a server. Zero values take the defaults.
type Options struct {
	// Socket is the daemon socket (required); Home is only named in the
	// fix a tool error gives when no daemon runs.
	Socket string
	Home   string
	// Version is the server version announced to hosts.
	Version string
	Logger  *slog.Logger
	// CallTimeout bounds one tool call or resource read on the socket.
	CallTimeout time.Duration
	// RedialMin and RedialMax bound the wait between attempts to listen to
	// a daemon that is not (yet) running.
	RedialMin, RedialMax time.Duration
	// CheckOutput validates every tool result against its output schema
	// before sending it (a self-check for tests and debugging; it costs
	// about 0.4 ms of CPU per recall).
	CheckOutput bool
}

// DefaultOptions are the settings a zero Options field takes.
func DefaultOptions() Options {
	return Options{Version: "dev", CallTimeout: 30 * time.Second, RedialMin: 250 * time.Millisecond, RedialMax: 5 * time.Second}
}

type server struct {
	opts  Options
	log   *slog.Logger
	d     *daemonLink
	names nameCache
	srv   *mcp.Server
}

func newServer(o Options) (*server, error) {
	if o.Socket == "" {
		return nil, fmt.Errorf("MCP server: no daemon socket given")
	}
	def := DefaultOptions()
	opt.Default(&o.Version, def.Version)
	opt.Default(&o.CallTimeout, def.CallTimeout)
	opt.Default(&o.RedialMin, def.RedialMin)
	opt.Default(&o.RedialMax, def.RedialMax)
	opt.Logger(&o.Logger)
	s := &server{opts: o, log: o.Logger, d: &daemonLink{path: o.Socket, home: o.Home}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: Name, Title: "cmbnode mesh memory", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       o.Logger.With("component", "mcp-sdk"),
		// No logging capability: logs go to stderr, never to the host.
		Capabilities:       &mcp.ServerCapabilities{},
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
	})
	s.srv.AddReceivingMiddleware(s.recoverPanics)
	s.addTools()
	s.addResources()
	s.addPrompts()
	return s, nil
}

const instructions = "cmbnode is this machine's mesh memory: memories (CMBs) this agent and its group remember, " +
	"shared over a peer-to-peer group. Use recall to find what the group knows before answering from scratch, " +
	"remember to keep a decision, finding or commitment for the group (focus says what it is about), " +
	"thread to read how a memory came about, recent to browse. Keys may be shortened to a unique prefix."

// Serve runs the MCP server on in/out (the host's pipes) until the host
// closes in or ctx ends. Logs go to the Logger, never to out.
func Serve(ctx context.Context, in io.Reader, out io.Writer, o Options) error {
	s, err := newServer(o)
	if err != nil {
		return err
	}
	defer s.d.close()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.watch(wctx)
	err = s.srv.Run(ctx, &stdioTransport{in: in, out: out, log: s.log})
	if err != nil && ctx.Err() == nil && !isEOF(err) {
		return fmt.Errorf("MCP session: %w", err)
	}
	return nil
}

func isEOF(err error) bool {
	return err == io.EOF || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection closed")
}

// recoverPanics turns a panic while serving one request (ours or the
// SDK's) into a JSON-RPC internal error for that request: one bad request
// must not end the host's session.
func (s *server) recoverPanics(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("panic serving a request", "method", method, "panic", r, "stack", string(debug.Stack()))
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error serving " + method + "; the server's log (stderr) has the details"}
			}
		}()
		return next(ctx, method, req)
	}
}

func (s *server) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.CallTimeout)
}
