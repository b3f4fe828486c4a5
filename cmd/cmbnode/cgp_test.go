package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp/cgptest"
	"github.com/cmbnode/cmbnode/node/embed/embedtest"
	"github.com/cmbnode/cmbnode/node/ipc"
)

const cgpSchema = "../../fixtures/cgp/contextgraph-envelope.schema.json"

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startCGPHTTPDaemon starts a daemon serving CGP over HTTP on a free
// loopback address, and returns it with the address. A port found free can
// be taken by another test's process before the daemon binds it; the
// daemon then exits at start, and another port is tried.
func startCGPHTTPDaemon(t *testing.T, home string, args ...string) (*daemonProc, string) {
	t.Helper()
	for try := 1; ; try++ {
		addr := freeAddr(t)
		d, err := spawnDaemon(t, home, append([]string{"--cgp-http", addr}, args...)...)
		if err == nil {
			return d, addr
		}
		if try == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

var cgpTopics = []string{"parser rollout", "latency budget", "schema migration", "incident review", "release notes", "cache eviction", "index rebuild"}

// seedDaemon remembers n records over the socket, every third one a remix
// of the record before it, so threads (episodes) exist.
func seedDaemon(t *testing.T, sock string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialSock(t, sock)
	defer c.Close()
	prev := ""
	for i := 0; i < n; i++ {
		topic := cgpTopics[i%len(cgpTopics)]
		a := ipc.RememberArgs{Fields: map[string]any{
			"focus":      fmt.Sprintf("%s step %d", topic, i),
			"issue":      fmt.Sprintf("risk %d in %s", i%11, topic),
			"commitment": "owner-" + fmt.Sprint(i%5),
			"mood":       map[string]any{"text": "steady", "valence": 0.2, "arousal": -0.1},
		}}
		if i%4 == 0 {
			// The harness's sample query asks for "conformance probe".
			a.Fields["perspective"] = "conformance probe seen from " + topic
		}
		if i%3 == 2 && prev != "" {
			a.Parents = []string{prev}
		}
		r, err := c.Remember(ctx, a)
		if err != nil {
			t.Fatalf("remember %d: %v", i, err)
		}
		prev = r.Key
	}
}

func assertConformant(t *testing.T, rep cgptest.Report, mayskip ...string) {
	t.Helper()
	t.Log("\n" + rep.String())
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("cmbnode fails %d CGP checks: %+v", len(f), f)
	}
	for _, name := range cgptest.AllChecks() {
		c := rep.Get(name)
		if c.Name == "" {
			t.Errorf("check %s did not run", name)
		} else if c.Status != cgptest.Pass && !slices.Contains(mayskip, name) {
			t.Errorf("check %s is %s (%s), want pass", name, c.Status, c.Evidence)
		}
	}
}

// TestCGPConformance runs the project's conformance harness against the
// real provider: `cmbnode cgp` over stdio relaying to a daemon that holds
// 220 CMBs with remix threads, and the daemon's HTTP binding.
func TestCGPConformance(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	d, addr := startCGPHTTPDaemon(t, home, "--no-mdns")
	seedDaemon(t, d.sock, 220)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stdio := &cgptest.StdioTarget{Label: "cmbnode cgp", Path: binary(t), Args: []string{"cgp", "--home", home}}
	// No file:// provenance and no embeddings fingerprint: nothing to check.
	assertConformant(t, cgptest.Run(ctx, stdio, cgptest.Options{SchemaPath: cgpSchema}),
		cgptest.CheckProvenanceFixture, cgptest.CheckEmbeddingFP)

	httpT := &cgptest.HTTPTarget{Label: "cmbnode --cgp-http", URL: "http://" + addr + "/contextgraph", Token: readToken(t, home)}
	assertConformant(t, cgptest.Run(ctx, httpT, cgptest.Options{SchemaPath: cgpSchema}),
		cgptest.CheckProvenanceFixture, cgptest.CheckEmbeddingFP, cgptest.CheckEOFClean)
}

// TestCGPShimDeclaresDaemonKernel: with a dense encoder configured (an
// OpenAI-compatible endpoint served by the test), `cmbnode cgp` declares
// the daemon's embeddings_fingerprint, so the harness's embedding checks
// run against the shim as they do against the HTTP binding, and status
// reports the encoder.
func TestCGPShimDeclaresDaemonKernel(t *testing.T) {
	const dim = 8
	enc := httptest.NewServer(embedtest.Handler(func(in string) []float32 {
		v := make([]float32, dim)
		v[0], v[1+len(in)%(dim-1)] = 1, float32(len(in))
		return v
	}))
	defer enc.Close()
	home := filepath.Join(t.TempDir(), "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("[embeddings]\nurl = %q\nmodel = \"test\"\ndimensions = %d\n", enc.URL, dim)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, home, "--no-mdns")
	seedDaemon(t, d.sock, 20)
	c, err := ipc.Dial(context.Background(), d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil || st.Dense == nil || st.Dense.Dim != dim || st.Dense.Fingerprint == "" {
		t.Fatalf("status reports the encoder as %+v (%v)", st.Dense, err)
	}
	if out := runCLI(t, "", "status", "--home", home).stdout; !strings.Contains(out, st.Dense.Fingerprint) {
		t.Fatalf("cmbnode status does not show the encoder:\n%s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdio := &cgptest.StdioTarget{Label: "cmbnode cgp", Path: binary(t), Args: []string{"cgp", "--home", home}}
	rep := cgptest.Run(ctx, stdio, cgptest.Options{SchemaPath: cgpSchema})
	if c := rep.Get(cgptest.CheckEmbeddingFP); c.Status != cgptest.Pass {
		t.Fatalf("embedding-fingerprint over the shim: %s (%s)\n%s", c.Status, c.Evidence, rep.String())
	}
	assertConformant(t, rep, cgptest.CheckProvenanceFixture, cgptest.CheckEmbeddingUndecl)
}

// readToken reads the bearer token the daemon minted into home.
func readToken(t testing.TB, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "cgp-http.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// postCGP POSTs a handshake to the daemon's binding with the given headers
// and returns the status and the body.
func postCGP(t *testing.T, addr string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/contextgraph",
		strings.NewReader(`{"type":"handshake","protocol_version":"contextgraph/1.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

// TestCGPHTTPDaemonRequiresToken: `cmbnode daemon --cgp-http` mints a 0600
// token into the home on first start and answers only requests bearing it
// from a loopback Host and no foreign page; a looser token file stops the
// daemon; deleting the file and restarting rotates the token. The token
// never reaches the logs, even at debug.
func TestCGPHTTPDaemonRequiresToken(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	d, addr := startCGPHTTPDaemon(t, home, "--log-level", "debug")
	path := filepath.Join(home, "cgp-http.token")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	tok := readToken(t, home)
	bearer := "Bearer " + tok

	if st, h, body := postCGP(t, addr, nil); st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != "Bearer" || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Fatalf("no token: %d %v %s", st, h, body)
	}
	if st, _, body := postCGP(t, addr, map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(tok))}); st != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %s", st, body)
	}
	if st, _, body := postCGP(t, addr, map[string]string{"Authorization": bearer}); st != http.StatusOK || !strings.Contains(body, `"handshake_ack"`) {
		t.Fatalf("token: %d %s", st, body)
	}
	if st, _, body := postCGP(t, addr, map[string]string{"Authorization": bearer, "Host": "rebound.example:7474"}); st != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host: %d %s", st, body)
	}
	if st, h, body := postCGP(t, addr, map[string]string{"Authorization": bearer, "Origin": "https://evil.example"}); st != http.StatusForbidden || h.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("cross-origin: %d %v %s", st, h, body)
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("stop: %v\n%s", err, d.logs)
	}
	if strings.Contains(d.logs.String(), tok) {
		t.Fatalf("the token is in the logs:\n%s", d.logs)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := spawnDaemon(t, home, "--cgp-http", addr); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) || strings.Contains(err.Error(), tok) {
		if d != nil {
			d.kill()
		}
		t.Fatalf("daemon with a 0644 token file: %v", err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, home, "--cgp-http", addr)
	if readToken(t, home) == tok {
		t.Fatal("restart after deleting the token file kept the token")
	}
	if st, _, body := postCGP(t, addr, map[string]string{"Authorization": bearer}); st != http.StatusUnauthorized {
		t.Fatalf("rotated-out token: %d %s", st, body)
	}
	if st, _, body := postCGP(t, addr, map[string]string{"Authorization": "Bearer " + readToken(t, home)}); st != http.StatusOK {
		t.Fatalf("new token: %d %s", st, body)
	}
}

// TestCGPHTTPDaemonUsesConfiguredToken: cgp_http_token in config.toml is
// the token, and no token file is minted beside it.
func TestCGPHTTPDaemonUsesConfiguredToken(t *testing.T) {
	home := t.TempDir()
	tok := "configured-" + strings.Repeat("0123456789", 4)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("cgp_http_token = \""+tok+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := startCGPHTTPDaemon(t, home)
	if st, _, body := postCGP(t, addr, map[string]string{"Authorization": "Bearer " + tok}); st != http.StatusOK || !strings.Contains(body, `"handshake_ack"`) {
		t.Fatalf("configured token: %d %s", st, body)
	}
	if st, _, body := postCGP(t, addr, nil); st != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", st, body)
	}
	if _, err := os.Stat(filepath.Join(home, "cgp-http.token")); !os.IsNotExist(err) {
		t.Fatalf("a token file was minted beside the configured token: %v", err)
	}
}

// TestCGPWithoutDaemon: the shim still acknowledges, and a query gets a
// named `unavailable` instead of a hang.
func TestCGPWithoutDaemon(t *testing.T) {
	home := t.TempDir()
	cmd := exec.Command(binary(t), "cgp", "--home", home)
	cmd.Stdin = strings.NewReader(`{"type":"handshake","protocol_version":"contextgraph/1.0"}` + "\n" +
		`{"type":"query","id":"q","query":{"goal":"x","max_frames":1,"max_tokens":10}}` + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cmbnode cgp: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 2 || !strings.Contains(lines[0], `"handshake_ack"`) {
		t.Fatalf("output: %q", out)
	}
	if !strings.Contains(lines[1], `"code":"unavailable"`) || !strings.Contains(lines[1], filepath.Join(home, "daemon.sock")) || !strings.Contains(lines[1], `"id":"q"`) {
		t.Fatalf("query without daemon: %s", lines[1])
	}
}
