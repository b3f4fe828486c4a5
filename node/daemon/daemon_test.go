package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
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

// loopbackOnly keeps a test daemon's mesh on 127.0.0.1 with mDNS off:
// tests send nothing beyond loopback (no multicast), whatever the defaults.
func loopbackOnly(o Overrides) Overrides {
	if len(o.Listen) == 0 {
		o.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	}
	o.NoMDNS = true
	return o
}

// start runs a daemon in this process and waits until it is ready.
func start(t *testing.T, home string, opts Options) *running {
	t.Helper()
	logs := &syncBuffer{}
	ready := make(chan string, 1)
	opts.Home, opts.Stderr, opts.Overrides = home, logs, loopbackOnly(opts.Overrides)
	userReady := opts.Ready
	opts.Ready = func(s string) {
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
	for _, want := range []string{"created a new identity", "msg=ready", "socket=" + d.socket, "msg=stopped", `msg="mesh started"`} {
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
	err := Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: loopbackOnly(Overrides{})})
	var re *RunningError
	if !errors.As(err, &re) || re.PID != os.Getpid() || !strings.Contains(err.Error(), home) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second daemon: %v; want a RunningError naming the home and pid %d", err, os.Getpid())
	}
	// With its socket file gone, the store lock still refuses.
	os.Remove(SocketPath(home))
	err = Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: loopbackOnly(Overrides{})})
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
	if err := Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: loopbackOnly(Overrides{Group: &bad})}); err == nil || !strings.Contains(err.Error(), "group") {
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

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestRunWiresEveryPart: the mesh joins a second daemon, the socket's query
// and the HTTP binding answer from the one CGP engine, and the metrics
// endpoint exports the node's, the mesh's, Go's, the process's and
// libp2p's families; they start in order and stop with the daemon.
func TestRunWiresEveryPart(t *testing.T) {
	ctx := context.Background()
	peerHome := t.TempDir()
	peer := start(t, peerHome, Options{Name: "bob"})
	pst, err := client(t, peer.socket).Status(ctx)
	if err != nil || pst.PeerID == "" || len(pst.Addrs) == 0 {
		t.Fatalf("peer status: %+v %v", pst, err)
	}

	// The peer's first start made it a private group of one; this home
	// joins it with the peer's secret, as "cmbnode join" would.
	home := t.TempDir()
	g, err := groupkey.LoadGroup(peerHome, "default")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groupkey.Join(home, "default", g.ID, g.Epochs[0], false); err != nil {
		t.Fatal(err)
	}
	metricsAddr, cgpAddr := freeAddr(t), freeAddr(t)
	d := start(t, home, Options{Version: "v9.9.9", Overrides: Overrides{
		Metrics: &metricsAddr, CGPHTTP: &cgpAddr, Bootstrap: pst.Addrs[:1],
	}})
	c := client(t, d.socket)
	var st ipc.StatusReply
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if st.Peers == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mesh did not join the bootstrap peer: %+v\n%s", st, d.logs)
		}
	}
	if st.PeerID == "" || len(st.Addrs) == 0 {
		t.Fatalf("status with a mesh: %+v", st)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Name != "bob" || peers[0].NodeID != pst.NodeID {
		t.Fatalf("peers with a mesh: %+v %v", peers, err)
	}

	rem, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "wiring zebra"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Query(ctx, json.RawMessage(`{"goal":"zebra","max_frames":4,"max_tokens":2000}`))
	if err != nil || !strings.Contains(string(res), rem.Key) || !strings.Contains(string(res), "cmbnode/v9.9.9") {
		t.Fatalf("query through the socket: %s %v", res, err)
	}

	// The HTTP binding minted its token into the home and answers with it.
	tok, err := os.ReadFile(filepath.Join(home, "cgp-http.token"))
	if err != nil {
		t.Fatal(err)
	}
	post := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+cgpAddr+"/contextgraph",
			strings.NewReader(`{"type":"query","id":"q1","query":{"goal":"zebra","max_frames":4,"max_tokens":2000}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(strings.TrimSpace(string(tok))); code != http.StatusOK || !strings.Contains(body, rem.Key) {
		t.Fatalf("CGP over HTTP with the token: %d %s", code, body)
	}
	if code, _ := post("not-the-token-0123456789abcdef0123"); code != http.StatusUnauthorized {
		t.Fatalf("CGP over HTTP with a wrong token: %d", code)
	}

	page := httpGet(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{"\ncmbnode_cmbs_authored_total 1\n", "\ncmbnode_store_cmbs 1\n", "\ncmbnode_peers 1\n",
		"\n# TYPE cmbnode_handshakes_total counter\n", "\n# TYPE go_goroutines gauge\n", "\n# TYPE process_open_fds gauge\n",
		"\n# TYPE libp2p_rcmgr_connections gauge\n", `libp2p_rcmgr_connections{dir="inbound",scope="system"}`} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics page lacks %q:\n%s", want, page)
		}
	}

	// Start order: mesh, CGP HTTP, metrics, then ready.
	logs := d.logs.String()
	at := -1
	for _, line := range []string{`msg="mesh started"`, `msg="serving CGP over HTTP"`, `msg="serving metrics"`, "msg=ready"} {
		i := strings.Index(logs, line)
		if i <= at {
			t.Fatalf("%s is out of order (or missing) in the start logs:\n%s", line, logs)
		}
		at = i
	}
	if err := d.shutdown(t); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{metricsAddr, cgpAddr} {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Errorf("%s still serves after the daemon stopped", addr)
		}
	}
	// The peer sees this daemon's mesh go.
	pc := client(t, peer.socket)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s, err := pc.Status(ctx); err == nil && s.Peers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mesh did not stop with the daemon")
		}
	}
}

// A part that fails to start stops what started before it: the store is
// released and the socket file removed, so the next start works.
func TestFailingPartStopsStartCleanly(t *testing.T) {
	home := t.TempDir()
	// A well-formed address of no interface here (TEST-NET-3): the mesh
	// cannot listen on it.
	notHere := "/ip4/203.0.113.7/tcp/0"
	err := Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: loopbackOnly(Overrides{Listen: []string{notHere}})})
	if err == nil || !strings.Contains(err.Error(), "join group default") {
		t.Fatalf("failing mesh: %v", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	err = Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: loopbackOnly(Overrides{Metrics: &busy})})
	if err == nil || !strings.Contains(err.Error(), "start metrics on "+busy) {
		t.Fatalf("metrics on a taken port: %v", err)
	}
	if _, err := os.Stat(SocketPath(home)); !os.IsNotExist(err) {
		t.Fatalf("socket file left after a failed start: %v", err)
	}
	d := start(t, home, Options{})
	if _, err := client(t, d.socket).Status(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Settings are checked before the home is touched: a bad flag leaves no
// directory, identity or config behind.
func TestBadSettingsLeaveTheHomeAlone(t *testing.T) {
	for _, o := range []Overrides{
		{Listen: []string{"garbage"}},
		{Bootstrap: []string{"/ip4/127.0.0.1/tcp/1"}},
	} {
		home := filepath.Join(t.TempDir(), "home")
		if err := Run(context.Background(), Options{Home: home, Stderr: io.Discard, Overrides: o}); err == nil {
			t.Fatalf("%+v: started", o)
		}
		if _, err := os.Stat(home); !os.IsNotExist(err) {
			t.Fatalf("%+v: home touched: %v", o, err)
		}
	}
}

func TestLoopbackDefault(t *testing.T) {
	for in, want := range map[string]string{":7474": "127.0.0.1:7474", "127.0.0.1:1": "127.0.0.1:1", "[::1]:9": "[::1]:9", "0.0.0.0:5": "0.0.0.0:5"} {
		if got := loopbackDefault(in); got != want {
			t.Errorf("loopbackDefault(%q) = %q, want %q", in, got, want)
		}
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

// Two fresh homes are two private groups of one: the same name, "default",
// but their own secrets, so bootstrapped to each other they stay apart and
// the secret is never logged. Two homes asked for a public group join by
// name, and each logs a WARN saying anyone who knows the name can read.
func TestFreshHomesArePrivatePublicIsExplicit(t *testing.T) {
	ctx := context.Background()
	aHome := t.TempDir()
	a := start(t, aHome, Options{Name: "alice"})
	ast, err := client(t, a.socket).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, t.TempDir(), Options{Name: "bob", Overrides: Overrides{Bootstrap: ast.Addrs[:1]}})
	bc := client(t, b.socket)
	time.Sleep(1500 * time.Millisecond)
	if st, err := bc.Status(ctx); err != nil || st.Peers != 0 {
		t.Fatalf("two fresh homes joined each other: %+v %v", st, err)
	}
	g, err := groupkey.LoadGroup(aHome, "default")
	if err != nil {
		t.Fatalf("first start made no group secret: %v", err)
	}
	secretB64 := base64.RawURLEncoding.EncodeToString(g.Epochs[0].Secret[:])
	for _, d := range []*running{a, b} {
		logs := d.logs.String()
		if !strings.Contains(logs, "created a new private group") || strings.Contains(logs, secretB64) {
			t.Errorf("logs should name the new private group and never its secret:\n%s", logs)
		}
	}

	yes := true
	p1 := start(t, t.TempDir(), Options{Name: "pub1", Overrides: Overrides{Public: &yes}})
	p1st, err := client(t, p1.socket).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2 := start(t, t.TempDir(), Options{Name: "pub2", Overrides: Overrides{Public: &yes, Bootstrap: p1st.Addrs[:1]}})
	p2c := client(t, p2.socket)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := p2c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Peers == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("two public daemons did not join: %+v\n%s", st, p2.logs)
		}
	}
	for _, d := range []*running{p1, p2} {
		if logs := d.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "anyone who knows its name") {
			t.Errorf("a public group's daemon did not warn:\n%s", logs)
		}
	}
}
