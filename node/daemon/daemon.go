// Package daemon is the node's composition root: it loads the identity
// (created on first run) and the config (file, then flag overrides), sets
// up logging, and builds the running node in this order: the store and node
// core, the mesh, the local socket with the CGP engine behind its query and
// verify, the CGP HTTP binding, the metrics endpoint, and retention. Run
// blocks until its context ends and then stops them in reverse.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/internal/logx"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/cgpnode"
	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/node/mesh"
	"github.com/cmbnode/cmbnode/node/metrics"
	"github.com/cmbnode/cmbnode/store"
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
	// Version is the build's version, which the CGP engine names in its
	// handshake and derivations ("" is "dev").
	Version string
	// Ready, when set, is told the socket path once the daemon serves.
	Ready func(socket string)
	// StoreOptions tune badger (tests shrink its caches).
	StoreOptions store.Options
	// IPC tunes the socket; Path, Node, CGP and Logger are set by Run.
	IPC ipc.Options
	// IdleGC turns the Go runtime's forced two-minute collection off while
	// the daemon is idle (no records coming in or authored), restoring
	// GOGC and GOMEMLIMIT at the first. The settings are the process's:
	// only a process that runs this one daemon and nothing else sets it.
	IdleGC bool
}

// Overrides hold the settings given as flags; nil or empty means "not
// given", so the file's value stands.
type Overrides struct {
	Group     *string
	Public    *bool
	Listen    []string
	Bootstrap []string
	Relays    []string
	// RelayService, Reachability and NATPortMap: --relay-service,
	// --reachability, --nat-port-map.
	RelayService *bool
	Reachability *string
	NATPortMap   *bool
	NoMDNS       bool
	CGPHTTP      *string
	Metrics      *string
	Retention    *time.Duration
	LogJSON      *bool
	LogLevel     *string
}

// Apply writes the overrides onto c.
func (o Overrides) Apply(c *config.Config) {
	override(&c.Group, o.Group)
	override(&c.Public, o.Public)
	overrideList(&c.Listen, o.Listen)
	overrideList(&c.Bootstrap, o.Bootstrap)
	overrideList(&c.Relays, o.Relays)
	override(&c.RelayService, o.RelayService)
	override(&c.Reachability, o.Reachability)
	override(&c.NATPortMap, o.NATPortMap)
	if o.NoMDNS {
		c.MDNS = false
	}
	override(&c.CGPHTTP, o.CGPHTTP)
	override(&c.Metrics, o.Metrics)
	override(&c.Retention.Duration, o.Retention)
	override(&c.LogJSON, o.LogJSON)
	override(&c.LogLevel, o.LogLevel)
}

// Validate checks each given flag's value on its own, naming the flag, so a
// mistake on the command line is refused before the home is touched.
func (o Overrides) Validate() error {
	if o.Retention != nil && *o.Retention < 0 {
		return errors.New("--retention must not be negative")
	}
	if o.LogLevel != nil {
		if err := config.CheckLogLevel(*o.LogLevel); err != nil {
			return fmt.Errorf("--log-level %w", err)
		}
	}
	if o.Group != nil {
		if err := group.Validate(*o.Group); err != nil {
			return fmt.Errorf("--group: %w", err)
		}
	}
	if err := cmp.Or(config.CheckEach("--listen", o.Listen, config.CheckListen),
		config.CheckEach("--bootstrap", o.Bootstrap, config.CheckBootstrap),
		config.CheckEach("--relay", o.Relays, config.CheckBootstrap)); err != nil {
		return err
	}
	if o.Reachability != nil {
		if err := config.CheckReachability(*o.Reachability); err != nil {
			return fmt.Errorf("--reachability: %w", err)
		}
	}
	for flag, v := range map[string]*string{"--cgp-http": o.CGPHTTP, "--metrics": o.Metrics} {
		if v != nil {
			if err := config.CheckHostPort(*v); err != nil {
				return fmt.Errorf("%s: %w", flag, err)
			}
		}
	}
	return nil
}

// override sets *dst to *v when the flag was given (v is not nil).
func override[T any](dst, v *T) {
	if v != nil {
		*dst = *v
	}
}

// overrideList sets *dst to a copy of v unless v is empty (the flag not given).
func overrideList(dst *[]string, v []string) {
	if len(v) > 0 {
		*dst = append([]string(nil), v...)
	}
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
	return fmt.Sprintf("%s is already running with home %s (socket %s)", who, e.Home, e.Socket)
}

func (e *RunningError) Unwrap() error { return e.Err }

// Run starts the daemon and serves until ctx ends (SIGINT/SIGTERM in the
// CLI), then stops cleanly: the socket stops and its file is removed, the
// metrics endpoint, the CGP HTTP binding and the mesh stop, the store is
// closed. It returns nil after a clean stop.
func Run(ctx context.Context, opts Options) error {
	if opts.Home == "" {
		return errors.New("daemon: no home directory")
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	opts.Version = cmp.Or(opts.Version, "dev")
	home := opts.Home
	// Settings first: a mistake in them leaves the home as it was.
	if err := opts.Overrides.Validate(); err != nil {
		return err
	}
	cfg, err := config.Load(home)
	if err != nil {
		return err
	}
	opts.Overrides.Apply(&cfg)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("settings (config %s and flags): %w", config.Path(home), err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("create home %s: %w", home, err)
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
	// The commented file `cmbnode init` writes, so every setting is there
	// to edit; an existing one is never touched. Flags stay per run.
	switch err := config.Write(home, config.Default()); {
	case err == nil:
		log.Info("wrote the default config", "file", config.Path(home))
	case !errors.Is(err, config.ErrExists):
		return err
	}
	nopts, err := nodeOptions(home, cfg, id, log, opts.StoreOptions, opts.Version)
	if err != nil {
		return err
	}
	n, err := node.Open(nopts)
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
	if st := n.Storage(); st.DiskFull {
		log.Warn("the disk is full: the daemon starts, serving reads; writes are refused with disk_full until space is freed",
			"path", st.Path, "free", st.Free, "need", st.Need, "readOnly", st.ReadOnly)
	}
	d := &daemon{log: log}
	d.add("close store", n.Close)
	defer d.stop()

	keys, err := groupKeys(home, cfg, log)
	if err != nil {
		return err
	}
	// libp2p registers its families while the mesh starts, so the registry
	// exists before the mesh; nothing is registered when no endpoint is set.
	mc := mesh.ConfigFrom(n, cfg, keys, log)
	mc.Version = opts.Version
	mc.PeerstorePath = filepath.Join(home, mesh.PeerstoreFile)
	var reg *prometheus.Registry
	if cfg.Metrics != "" {
		reg = metrics.NewRegistry()
		mc.Metrics = reg
	}
	m, err := mesh.Start(ctx, mc)
	if err != nil {
		return fmt.Errorf("join group %s: %w", cfg.Group, err)
	}
	n.AttachMesh(m)
	d.add("stop mesh", func() error {
		n.AttachMesh(nil)
		return m.Close()
	})

	// The socket's query and verify and the HTTP binding share one engine.
	eng, err := cgpnode.NewEngine(n, opts.Version, log.With("component", "cgp"))
	if err != nil {
		return fmt.Errorf("start the CGP engine: %w", err)
	}
	ipcOpts := opts.IPC
	ipcOpts.Path, ipcOpts.Node, ipcOpts.Logger, ipcOpts.CGP = sock, n, log.With("component", "socket"), cgpnode.SocketHandler{Engine: eng}
	srv, err := ipc.Listen(ipcOpts)
	var inUse *ipc.InUseError
	if errors.As(err, &inUse) {
		return &RunningError{Home: home, Socket: sock, PID: inUse.PID, Err: err}
	}
	if err != nil {
		return err
	}
	// Until it serves, closing the listener is all the socket needs.
	d.add("close socket", srv.Close)

	if addr := cfg.CGPHTTP; addr != "" {
		c, err := startCGPHTTP(ctx, eng, home, cfg.CGPHTTPToken, loopbackDefault(addr), log.With("component", "cgp-http"))
		if err != nil {
			return fmt.Errorf("start CGP over HTTP on %s: %w", addr, err)
		}
		d.add("stop CGP over HTTP", c.Close)
		log.Info("serving CGP over HTTP", "addr", addr)
	}
	if addr := cfg.Metrics; addr != "" {
		mlog := log.With("component", "metrics")
		if err := metrics.Register(reg, n, m); err != nil {
			return fmt.Errorf("start metrics on %s: %w", addr, err)
		}
		if err := metrics.RegisterLocal(reg, srv, eng); err != nil {
			return fmt.Errorf("start metrics on %s: %w", addr, err)
		}
		s, err := metrics.Serve(loopbackDefault(addr), metrics.Handler(reg, mlog), mlog)
		if err != nil {
			return fmt.Errorf("start metrics on %s: %w", addr, err)
		}
		d.add("stop metrics", s.Close)
		log.Info("serving metrics", "addr", addr)
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
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		pruneRoster(bg, n, cfg.Admission.RosterIdleTTL.Duration, log)
	}()
	var idle *idleGC
	if opts.IdleGC {
		idle = newIdleGC()
	}
	trimmed := make(chan struct{})
	go func() {
		defer close(trimmed)
		trimAfterBursts(bg, n, idle)
	}()

	log.Info("ready", "socket", sock, "nodeId", id.NodeID, "name", id.Name, "group", cfg.Group, "private", !cfg.Public, "home", home, "cmbs", n.Status().CMBs)
	if opts.Ready != nil {
		opts.Ready(sock)
	}
	if err := sdNotify("READY=1\nSTATUS=serving " + sock); err != nil {
		log.Warn("could not tell the service manager the daemon is ready", "socket", os.Getenv(NotifySocketEnv), "err", err)
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping", "reason", context.Cause(ctx))
		_ = sdNotify("STOPPING=1")
		srv.Close()
		serveErr = <-served
	case serveErr = <-served:
		log.Error("socket stopped", "err", serveErr)
	}
	stopBG()
	<-retained
	<-pruned
	<-trimmed
	if err := d.stop(); err != nil && serveErr == nil {
		serveErr = err
	}
	if serveErr != nil {
		return serveErr
	}
	log.Info("stopped", "home", home)
	return nil
}

// groupKeys loads the private group's secrets, making them on first start
// so a fresh home is a group of one that shares nothing until the user
// invites or joins. A public group has none: it is logged at WARN, since
// anyone who knows its name can join it and read everything. The secret
// itself is never logged, only where it lives.
func groupKeys(home string, cfg config.Config, log *slog.Logger) (*groupkey.Keyring, error) {
	if cfg.Public {
		log.Warn("the group is public: anyone who knows its name can join it and read every CMB it shares", "group", cfg.Group)
		return nil, nil
	}
	o := groupkey.Options{Grace: cfg.RotationGrace.Duration}
	keys, err := groupkey.Load(home, cfg.Group, o)
	if errors.Is(err, groupkey.ErrNoSecret) {
		if _, err = groupkey.Create(home, cfg.Group, time.Now()); err != nil {
			return nil, fmt.Errorf("create the secret of group %s: %w", cfg.Group, err)
		}
		log.Info("created a new private group; share it with cmbnode invite", "group", cfg.Group, "dir", groupkey.Dir(home, cfg.Group))
		keys, err = groupkey.Load(home, cfg.Group, o)
	}
	if err != nil {
		return nil, fmt.Errorf("load the secret of group %s: %w", cfg.Group, err)
	}
	return keys, nil
}

// daemon holds what Run started, to stop it in reverse.
type daemon struct {
	log     *slog.Logger
	stops   []stop
	stopped bool
}

// stop undoes one started part; what names it in an error ("stop mesh").
type stop struct {
	what string
	f    func() error
}

func (d *daemon) add(what string, f func() error) { d.stops = append(d.stops, stop{what, f}) }

// stop undoes the started parts in reverse, the store last; it is idempotent.
func (d *daemon) stop() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	var errs []error
	for i := len(d.stops) - 1; i >= 0; i-- {
		s := d.stops[i]
		if err := s.f(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.what, err))
		}
	}
	for _, err := range errs {
		d.log.Error("stop", "err", err)
	}
	return errors.Join(errs...)
}

// startCGPHTTP serves the CGP HTTP binding at addr. The configured token
// wins; otherwise the home's token file, minted on first use. Its path is
// logged, never the token.
func startCGPHTTP(ctx context.Context, eng *cgp.Engine, home, token, addr string, log *slog.Logger) (io.Closer, error) {
	if token == "" {
		var created bool
		var err error
		if token, created, err = cgpnode.LoadOrCreateToken(home); err != nil {
			return nil, err
		}
		if created {
			log.Info("created the CGP HTTP bearer token", "file", cgpnode.TokenPath(home))
		}
	}
	return cgpnode.StartHTTP(ctx, eng, addr, token, log)
}

// loopbackDefault binds a bare ":PORT" to loopback: metrics and the CGP
// HTTP binding serve this machine unless the operator names an interface.
func loopbackDefault(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// pruneRoster expires idle roster entries (node.PruneRoster) now and then
// periodically, so entries unseen for ttl go on a node no handshake
// reaches; new entries prune on their own once enough have come.
func pruneRoster(ctx context.Context, n *node.Node, ttl time.Duration, log *slog.Logger) {
	t := time.NewTicker(min(max(ttl/10, time.Minute), time.Hour))
	defer t.Stop()
	for {
		if _, err := n.PruneRoster(ctx); err != nil && ctx.Err() == nil {
			log.Warn("pruning the roster failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
		res, err := n.Purge(ctx, retention)
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
	// Components nest their loggers (mesh, then pubsub inside it): each
	// line keeps one component key, the innermost.
	if asJSON {
		return slog.New(logx.OneComponent(slog.NewJSONHandler(w, o)))
	}
	return slog.New(logx.OneComponent(slog.NewTextHandler(w, o)))
}

// ErrNoStore: the home holds no store to check.
var ErrNoStore = errors.New("no store")

// CheckOffline runs the store's consistency check on a home no daemon
// serves: it opens the store itself, and refuses with a *RunningError when
// a daemon holds it. Problems are the result; an error means the check
// could not run.
func CheckOffline(ctx context.Context, home string) (node.CheckResult, error) {
	sock := SocketPath(home)
	if alive, pid := ipc.Probe(sock); alive {
		return node.CheckResult{}, &RunningError{Home: home, Socket: sock, PID: pid}
	}
	dir := node.StoreDir(home)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return node.CheckResult{}, fmt.Errorf("%w at %s", ErrNoStore, dir)
	}
	st, err := store.Open(dir, store.Options{Home: home})
	if errors.Is(err, store.ErrLocked) {
		return node.CheckResult{}, &RunningError{Home: home, Socket: sock, PID: lockHolder(dir), Err: err}
	}
	if err != nil {
		return node.CheckResult{}, err
	}
	defer st.Close()
	return node.CheckOf(ctx, st)
}

// nodeOptions are the node's settings from the config: the store's
// (so, with max_clock_skew unless so sets one), strict_signatures, the
// admission limits, and recall's (encoder, SVAF policy).
func nodeOptions(home string, cfg config.Config, id *identity.Identity, log *slog.Logger, so store.Options, version string) (node.Options, error) {
	so.Logger = log.With("component", "store")
	so.MaxClockSkew = cmp.Or(so.MaxClockSkew, cfg.MaxClockSkew.Duration)
	nopts := node.Options{Home: home, Group: cfg.Group, Identity: id, Logger: log, StoreOptions: so, AllowUnsigned: !cfg.StrictSignatures, Version: version}
	a := cfg.Admission
	nopts.Limits = node.Limits{MaxFutureSkew: a.MaxFutureSkew.Duration, AuthorRate: a.AuthorRate, AuthorBurst: a.AuthorBurst,
		RosterIdleTTL: a.RosterIdleTTL.Duration, RosterMaxIdle: a.RosterMaxIdle}
	if err := recallOptions(cfg, &nopts); err != nil {
		return node.Options{}, err
	}
	return nopts, nil
}
