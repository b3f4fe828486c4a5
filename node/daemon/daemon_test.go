package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cmbnode/cmb"
	"cmbnode/node"
	"cmbnode/node/config"
	"cmbnode/node/identity"
	"cmbnode/node/ipc"
)

// syncBuffer collects logs written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type running struct {
	home   string
	socket string
	logs   *syncBuffer
	stop   context.CancelFunc
	done   chan error
}

// start runs a daemon in this process and waits until it is ready.
func start(t *testing.T, home string, opts Options) *running {
	t.Helper()
	logs := &syncBuffer{}
	ready := make(chan string, 1)
	opts.Home, opts.Stderr = home, logs
	userReady := opts.Hooks.Ready
	opts.Hooks.Ready = func(s string) {
		if userReady != nil {
			userReady(s)
		}
		ready <- s
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{home: home, logs: logs, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, opts) }()
	select {
	case r.socket = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("daemon did not start: %v\nlogs:\n%s", err, logs)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("daemon not ready; logs:\n%s", logs)
	}
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

func (r *running) shutdown(t *testing.T) error {
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
			return err
		}
		return nil
	case <-time.After(60 * time.Second):
		t.Fatalf("daemon did not stop; logs:\n%s", r.logs)
		return nil
	}
}

func client(t *testing.T, socket string) *ipc.Client {
	t.Helper()
	c, err := ipc.Dial(context.Background(), socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRunServesAndStopsCleanly(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home") // does not exist yet
	d := start(t, home, Options{Name: "first-run"})
	if d.socket != SocketPath(home) {
		t.Fatalf("socket %s, want %s", d.socket, SocketPath(home))
	}
	id, err := identity.Load(home)
	if err != nil || id.Name != "first-run" {
		t.Fatalf("identity not created on first run: %v %v", id, err)
	}
	ctx := context.Background()
	c := client(t, d.socket)
	res, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "survives a restart"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.NodeID != id.NodeID || st.Group != "default" || st.CMBs != 1 {
		t.Fatalf("status: %+v %v", st, err)
	}
	if err := d.shutdown(t); err != nil {
		t.Fatalf("clean stop returned %v", err)
	}
	if _, err := os.Stat(d.socket); !os.IsNotExist(err) {
		t.Fatalf("socket file left after stop: %v", err)
	}
	logs := d.logs.String()
	for _, want := range []string{"created a new identity", "msg=ready", "socket=" + d.socket, "msg=stopped", "mesh is not in this build"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	// The store was closed: a new daemon opens it and has the record.
	d2 := start(t, home, Options{})
	g, err := client(t, d2.socket).Get(ctx, res.Key)
	if err != nil || !strings.Contains(string(g.CMB), "survives a restart") {
		t.Fatalf("after restart: %s %v", g.CMB, err)
	}
	if strings.Contains(d2.logs.String(), "created a new identity") {
		t.Fatal("a second start created another identity")
	}
}

func TestSecondDaemonIsRefused(t *testing.T) {
	home := t.TempDir()
	start(t, home, Options{})
	err := Run(context.Background(), Options{Home: home, Stderr: io.Discard})
	var re *RunningError
	if !errors.As(err, &re) || re.PID != os.Getpid() || !strings.Contains(err.Error(), home) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second daemon: %v; want a RunningError naming the home and pid %d", err, os.Getpid())
	}
	// With its socket file gone, the store lock still refuses.
	os.Remove(SocketPath(home))
	err = Run(context.Background(), Options{Home: home, Stderr: io.Discard})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), home) || re.PID != os.Getpid() {
		t.Fatalf("second daemon without the socket: %v; want the home and pid %d (from the store's lock)", err, os.Getpid())
	}
}

func TestStaleSocketFromACrashIsReplaced(t *testing.T) {
	home := t.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(home), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	d := start(t, home, Options{})
	if _, err := client(t, d.socket).Status(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFlagsOverrideTheConfigFile(t *testing.T) {
	home := t.TempDir()
	if _, err := identity.Create(home, "cfg", nil); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.Group = "alpha"
	c.LogLevel = "warn"
	if err := config.Write(home, c); err != nil {
		t.Fatal(err)
	}
	d := start(t, home, Options{})
	st, err := client(t, d.socket).Status(context.Background())
	if err != nil || st.Group != "alpha" {
		t.Fatalf("group from config: %+v %v", st, err)
	}
	if strings.Contains(d.logs.String(), "level=INFO") {
		t.Fatalf("log_level warn in the config was ignored:\n%s", d.logs)
	}
	d.shutdown(t)

	beta, debug, yes := "beta", "debug", true
	d = start(t, home, Options{Overrides: Overrides{Group: &beta, LogLevel: &debug, LogJSON: &yes}})
	st, err = client(t, d.socket).Status(context.Background())
	if err != nil || st.Group != "beta" {
		t.Fatalf("group from flag: %+v %v", st, err)
	}
	// --log-json: every line is one JSON object, and "ready" is among them.
	d.shutdown(t)
	sawReady := false
	sc := bufio.NewScanner(strings.NewReader(d.logs.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %s", sc.Text())
		}
		if line["msg"] == "ready" && line["socket"] == d.socket {
			sawReady = true
		}
	}
	if !sawReady {
		t.Fatalf("no ready line in JSON logs:\n%s", d.logs)
	}

	bad := "Not A Group!"
	if err := Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: Overrides{Group: &bad}}); err == nil || !strings.Contains(err.Error(), "group") {
		t.Fatalf("invalid group flag: %v", err)
	}
}

func TestOverridesApply(t *testing.T) {
	c := config.Default()
	Overrides{}.Apply(&c)
	if c.Group != "default" || !c.MDNS || len(c.Listen) != 2 {
		t.Fatalf("empty overrides changed the config: %+v", c)
	}
	g, addr, r := "g", "127.0.0.1:9464", 48*time.Hour
	Overrides{Group: &g, Listen: []string{"/ip4/127.0.0.1/tcp/4001"}, Bootstrap: []string{"/dns/x/tcp/1/p2p/y"}, NoMDNS: true, Metrics: &addr, Retention: &r}.Apply(&c)
	if c.Group != "g" || c.MDNS || len(c.Listen) != 1 || len(c.Bootstrap) != 1 || c.Metrics != addr || c.Retention.Duration != r {
		t.Fatalf("overrides not applied: %+v", c)
	}
}

// fakeMesh stands in for node/mesh.
type fakeMesh struct {
	closed chan struct{}
	node   *node.Node
}

func (f *fakeMesh) Publish(context.Context, *cmb.Record) error { return nil }
func (f *fakeMesh) Peers() []node.PeerInfo {
	return []node.PeerInfo{{NodeID: "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Name: "bob", PeerID: "12D3KooWbob", Group: "default", Addrs: []string{}}}
}
func (f *fakeMesh) PeerID() string  { return "12D3KooWself" }
func (f *fakeMesh) Addrs() []string { return []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWself"} }
func (f *fakeMesh) Close() error {
	// The node must still be usable while the mesh stops.
	f.node.Status()
	close(f.closed)
	return nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

type echoCGP struct{}

func (echoCGP) Query(_ context.Context, q json.RawMessage) (json.RawMessage, error) { return q, nil }
func (echoCGP) Verify(_ context.Context, r json.RawMessage) (json.RawMessage, error) {
	return r, nil
}

func TestHooksPlugIn(t *testing.T) {
	home := t.TempDir()
	mesh := &fakeMesh{closed: make(chan struct{})}
	var order []string
	var mu sync.Mutex
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	metricsAddr := "127.0.0.1:0"
	hooks := Hooks{
		StartMesh: func(ctx context.Context, env Env) (io.Closer, error) {
			note("mesh")
			if env.Node == nil || env.Identity == nil || env.Config.Group != "default" || env.Socket != SocketPath(home) {
				t.Errorf("mesh hook got env %+v", env)
			}
			mesh.node = env.Node
			env.Node.AttachMesh(mesh)
			return mesh, nil
		},
		CGP: func(env Env) (ipc.CGPHandler, error) { note("cgp"); return echoCGP{}, nil },
		StartMetrics: func(ctx context.Context, env Env, addr string) (io.Closer, error) {
			note("metrics " + addr)
			return closerFunc(func() error { note("metrics closed"); return nil }), nil
		},
	}
	cgpAddr := "127.0.0.1:7474"
	d := start(t, home, Options{Hooks: hooks, Overrides: Overrides{Metrics: &metricsAddr, CGPHTTP: &cgpAddr}})
	c := client(t, d.socket)
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil || st.PeerID != "12D3KooWself" || st.Peers != 1 || len(st.Addrs) != 1 {
		t.Fatalf("status with a mesh: %+v %v", st, err)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Name != "bob" {
		t.Fatalf("peers with a mesh: %+v %v", peers, err)
	}
	res, err := c.Query(ctx, json.RawMessage(`{"goal":"g"}`))
	if err != nil || string(res) != `{"goal":"g"}` {
		t.Fatalf("query through the CGP hook: %s %v", res, err)
	}
	if !strings.Contains(d.logs.String(), "cgp_http is set but nothing is served") {
		t.Fatalf("a configured feature with no implementation was not reported:\n%s", d.logs)
	}
	if err := d.shutdown(t); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mesh.closed:
	default:
		t.Fatal("mesh was not closed")
	}
	want := "cgp,mesh,metrics 127.0.0.1:0,metrics closed"
	if got := strings.Join(order, ","); got != want {
		t.Fatalf("hook order %s, want %s", got, want)
	}
}

func TestFailingHookStopsStartCleanly(t *testing.T) {
	home := t.TempDir()
	err := Run(context.Background(), Options{Home: home, Stderr: io.Discard, Hooks: Hooks{
		StartMesh: func(context.Context, Env) (io.Closer, error) { return nil, errors.New("no network") },
	}})
	if err == nil || !strings.Contains(err.Error(), "no network") {
		t.Fatalf("failing mesh: %v", err)
	}
	// The store was released: the next start works.
	d := start(t, home, Options{})
	if _, err := client(t, d.socket).Status(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionPurgesAtStart(t *testing.T) {
	home := t.TempDir()
	d := start(t, home, Options{})
	ctx := context.Background()
	old, err := client(t, d.socket).Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "short-lived"}})
	if err != nil {
		t.Fatal(err)
	}
	d.shutdown(t)
	time.Sleep(5 * time.Millisecond) // so the record is older than the retention below
	keep := time.Millisecond
	d = start(t, home, Options{Overrides: Overrides{Retention: &keep}})
	c := client(t, d.socket)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := c.Get(ctx, old.Key)
		var e *ipc.Error
		if errors.As(err, &e) && e.Code == ipc.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record older than the retention was not purged: %v\n%s", err, d.logs)
		}
	}
	// The deletion is visible before the purge returns (it then compacts
	// the value log) and logs.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.logs.String(), "retention purge"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("purge not logged:\n%s", d.logs)
		}
	}
}
