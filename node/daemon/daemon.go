// Package daemon composes a running node: identity (created on first run),
// config (file, then flag overrides), logging, the store, the local socket,
// retention, and — through Hooks — the parts other packages own: the mesh,
// the CGP engine and its HTTP binding, and the metrics endpoint. Run blocks
// until its context ends and then stops everything in order.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"cmbnode/node"
	"cmbnode/node/config"
	"cmbnode/node/identity"
	"cmbnode/node/ipc"
	"cmbnode/store"
)

// SocketName is the socket file inside the home directory.
const SocketName = "daemon.sock"

// SocketPath is where the daemon for home listens.
func SocketPath(home string) string { return filepath.Join(home, SocketName) }

// Options configure Run.
type Options struct {
	// Home is the node's directory ($CMBNODE_HOME); created if missing.
	Home string
	// Overrides are what flags set; they win over config.toml.
	Overrides Overrides
	// Name names an identity created on first run ("" derives one from
	// the hostname); an existing identity keeps its name.
	Name string
	// Stderr receives the logs (os.Stderr when nil).
	Stderr io.Writer
	Hooks  Hooks
	// StoreOptions tune badger (tests shrink its caches).
	StoreOptions store.Options
	// IPC tunes the socket; Path, Node, CGP and Logger are set by Run.
	IPC ipc.Options
}

// Overrides hold the settings given as flags; nil or empty means "not
// given", so the file's value stands.
type Overrides struct {
	Group     *string
	Listen    []string
	Bootstrap []string
	NoMDNS    bool
	CGPHTTP   *string
	Metrics   *string
	Retention *time.Duration
	LogJSON   *bool
	LogLevel  *string
}

// Apply writes the overrides onto c.
func (o Overrides) Apply(c *config.Config) {
	if o.Group != nil {
		c.Group = *o.Group
	}
	if len(o.Listen) > 0 {
		c.Listen = append([]string(nil), o.Listen...)
	}
	if len(o.Bootstrap) > 0 {
		c.Bootstrap = append([]string(nil), o.Bootstrap...)
	}
	if o.NoMDNS {
		c.MDNS = false
	}
	if o.CGPHTTP != nil {
		c.CGPHTTP = *o.CGPHTTP
	}
	if o.Metrics != nil {
		c.Metrics = *o.Metrics
	}
	if o.Retention != nil {
		c.Retention.Duration = *o.Retention
	}
	if o.LogJSON != nil {
		c.LogJSON = *o.LogJSON
	}
	if o.LogLevel != nil {
		c.LogLevel = *o.LogLevel
	}
}

// Env is what a hook gets to work with. Fields may be added; hooks should
// not assume it stays this size.
type Env struct {
	Home     string
	Config   config.Config
	Identity *identity.Identity
	Node     *node.Node
	// Socket is the local socket's path (not yet serving when hooks start).
	Socket string
	Logger *slog.Logger
}

// Hooks are the seams where the parts other packages own plug in. A nil
// hook means the feature is not in this build: the daemon says so in its
// log when the config asks for it, rather than ignoring the setting.
//
// Start hooks run in this order before the socket serves: CGP, StartMesh,
// StartCGPHTTP, StartMetrics. The closers they return are closed in
// reverse order after the socket has stopped and before the store closes,
// so a closer may still use the node but must not return while its own
// goroutines can still call it.
type Hooks struct {
	// StartMesh joins env.Config.Group over libp2p (listen, bootstrap,
	// mdns settings are its to read), attaches itself with
	// env.Node.AttachMesh, feeds received records through Node.Check and
	// Node.Accept, and publishes peer-joined / peer-left on
	// env.Node.Events(). The daemon detaches it after closing it.
	StartMesh func(ctx context.Context, env Env) (io.Closer, error)
	// CGP returns the handler for the socket's query and verify requests
	// (the CGP engine over the node's store).
	CGP func(env Env) (ipc.CGPHandler, error)
	// StartCGPHTTP serves the CGP HTTP binding at addr (config cgp_http).
	StartCGPHTTP func(ctx context.Context, env Env, addr string) (io.Closer, error)
	// StartMetrics serves the Prometheus endpoint at addr (config metrics).
	StartMetrics func(ctx context.Context, env Env, addr string) (io.Closer, error)
	// Ready is told the socket path once the daemon serves.
	Ready func(socket string)
}

// RunningError means another daemon holds the home.
type RunningError struct {
	Home   string
	Socket string
	PID    int // 0 if unknown
	Err    error
}

func (e *RunningError) Error() string {
	who := "another cmbnode daemon"
	if e.PID > 0 {
		who = fmt.Sprintf("another cmbnode daemon (pid %d)", e.PID)
	}
	return fmt.Sprintf("%s is already running with home %s (socket %s); stop it, or start this one with another --home", who, e.Home, e.Socket)
}

func (e *RunningError) Unwrap() error { return e.Err }

// Run starts the daemon and serves until ctx ends (SIGINT/SIGTERM in the
// CLI), then stops cleanly: the socket stops and its file is removed,
// hooks are closed, the store is closed. It returns nil after a clean stop.
func Run(ctx context.Context, opts Options) error {
	if opts.Home == "" {
		return errors.New("daemon: no home directory")
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	home := opts.Home
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("create home %s: %w", home, err)
	}
	cfg, err := config.Load(home)
	if err != nil {
		return err
	}
	opts.Overrides.Apply(&cfg)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("settings (config %s and flags): %w", config.Path(home), err)
	}
	log := NewLogger(opts.Stderr, cfg.LogJSON, cfg.LogLevel)
	sock := SocketPath(home)

	// A live socket means a daemon runs here; say so before touching the store.
	if alive, pid := ipc.Probe(sock); alive {
		return &RunningError{Home: home, Socket: sock, PID: pid}
	}
	id, created, err := identity.LoadOrCreate(home, opts.Name)
	if err != nil {
		return err
	}
	if created {
		log.Info("created a new identity", "nodeId", id.NodeID, "name", id.Name, "file", identity.Path(home))
	}
	so := opts.StoreOptions
	so.Logger = log.With("component", "store")
	if so.MaxClockSkew == 0 {
		so.MaxClockSkew = cfg.MaxClockSkew.Duration
	}
	n, err := node.Open(node.Options{Home: home, Group: cfg.Group, Identity: id, Logger: log, StoreOptions: so, AllowUnsigned: !cfg.StrictSignatures})
	if errors.Is(err, store.ErrLocked) {
		_, pid := ipc.Probe(sock)
		if pid == 0 {
			pid = lockHolder(node.StoreDir(home))
		}
		return &RunningError{Home: home, Socket: sock, PID: pid, Err: err}
	}
	if err != nil {
		return fmt.Errorf("open node: %w", err)
	}
	d := &daemon{log: log, node: n}
	defer d.stop()

	env := Env{Home: home, Config: cfg, Identity: id, Node: n, Socket: sock, Logger: log}
	if err := d.startHooks(ctx, env, opts.Hooks); err != nil {
		return err
	}
	ipcOpts := opts.IPC
	ipcOpts.Path, ipcOpts.Node, ipcOpts.Logger, ipcOpts.CGP = sock, n, log.With("component", "socket"), d.cgp
	srv, err := ipc.Listen(ipcOpts)
	var inUse *ipc.InUseError
	if errors.As(err, &inUse) {
		return &RunningError{Home: home, Socket: sock, PID: inUse.PID, Err: err}
	}
	if err != nil {
		return err
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()

	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	retained := make(chan struct{})
	go func() {
		defer close(retained)
		retain(bg, n, cfg.Retention.Duration, log)
	}()

	log.Info("ready", "socket", sock, "nodeId", id.NodeID, "name", id.Name, "group", cfg.Group, "home", home, "cmbs", n.Status().CMBs)
	if opts.Hooks.Ready != nil {
		opts.Hooks.Ready(sock)
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping", "reason", context.Cause(ctx))
		srv.Close()
		serveErr = <-served
	case serveErr = <-served:
		log.Error("socket stopped", "err", serveErr)
	}
	stopBG()
	<-retained
	if err := d.stop(); err != nil && serveErr == nil {
		serveErr = err
	}
	if serveErr != nil {
		return serveErr
	}
	log.Info("stopped", "home", home)
	return nil
}

// daemon holds what Run started, to stop it in reverse.
type daemon struct {
	log     *slog.Logger
	node    *node.Node
	cgp     ipc.CGPHandler
	closers []namedCloser
	mesh    bool
	stopped bool
}

type namedCloser struct {
	name string
	c    io.Closer
}

func (d *daemon) startHooks(ctx context.Context, env Env, h Hooks) error {
	cfg := env.Config
	if h.CGP != nil {
		c, err := h.CGP(env)
		if err != nil {
			return fmt.Errorf("start the CGP engine: %w", err)
		}
		d.cgp = c
	} else {
		d.log.Info("Context Graph queries are not in this build: the socket's query and verify reply unavailable")
	}
	if h.StartMesh != nil {
		c, err := h.StartMesh(ctx, env)
		if err != nil {
			return fmt.Errorf("join group %s: %w", cfg.Group, err)
		}
		d.add("mesh", c)
		d.mesh = true
	} else {
		d.log.Warn("the mesh is not in this build: running alone; listen, bootstrap and mdns settings are not used",
			"listen", strings.Join(cfg.Listen, ","), "bootstrap", len(cfg.Bootstrap), "mdns", cfg.MDNS)
	}
	start := func(what, setting, addr string, hook func(context.Context, Env, string) (io.Closer, error)) error {
		if addr == "" {
			return nil
		}
		if hook == nil {
			d.log.Warn(what+" is not in this build: "+setting+" is set but nothing is served", setting, addr)
			return nil
		}
		c, err := hook(ctx, env, addr)
		if err != nil {
			return fmt.Errorf("start %s on %s: %w", what, addr, err)
		}
		d.add(what, c)
		d.log.Info("serving "+what, "addr", addr)
		return nil
	}
	if err := start("CGP over HTTP", "cgp_http", cfg.CGPHTTP, h.StartCGPHTTP); err != nil {
		return err
	}
	return start("metrics", "metrics", cfg.Metrics, h.StartMetrics)
}

func (d *daemon) add(name string, c io.Closer) {
	if c != nil {
		d.closers = append(d.closers, namedCloser{name, c})
	}
}

// stop closes the hooks in reverse and then the node; it is idempotent.
func (d *daemon) stop() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		c := d.closers[i]
		if err := c.c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", c.name, err))
		}
	}
	if d.mesh {
		d.node.AttachMesh(nil)
	}
	if err := d.node.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	for _, err := range errs {
		d.log.Error("stop", "err", err)
	}
	return errors.Join(errs...)
}

// retain purges records older than the retention period now and then
// periodically; 0 keeps everything.
func retain(ctx context.Context, n *node.Node, retention time.Duration, log *slog.Logger) {
	if retention <= 0 {
		return
	}
	every := min(max(retention/10, time.Minute), time.Hour)
	log.Info("retention on", "keep", retention, "checkEvery", every)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		res, err := n.Store().Purge(ctx, retention)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("retention purge failed", "err", err)
		case err == nil && res.Expired > 0:
			log.Info("retention purge", "expired", res.Expired, "deleted", res.Deleted, "keptForLineage", res.Protected)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lockHolder reads the pid badger writes into its directory lock file, to
// name the holder when its socket is gone; 0 if unknown.
func lockHolder(storeDir string) int {
	b, err := os.ReadFile(filepath.Join(storeDir, "LOCK"))
	if err != nil || len(b) > 32 {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// NewLogger builds the stderr logger: text, or JSON; level debug, info,
// warn or error (anything else is info).
func NewLogger(w io.Writer, asJSON bool, level string) *slog.Logger {
	var lv slog.Level
	switch level {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	}
	o := &slog.HandlerOptions{Level: lv}
	if asJSON {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
