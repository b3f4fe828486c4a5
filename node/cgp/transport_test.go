package cgp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/cgp/cgptest"
)

func serveLines(t *testing.T, h cgp.Handler, in string) []map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := cgp.Serve(context.Background(), strings.NewReader(in), &out, h, cgp.ServeOptions{}); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	var replies []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("reply line is not JSON: %q", l)
		}
		replies = append(replies, m)
	}
	return replies
}

func TestSessionTolerance(t *testing.T) {
	e := mustEngine(t, smallStore())
	in := strings.Join([]string{
		`{"type":"query","id":"early","query":{"goal":"x","max_frames":1,"max_tokens":10}}`, // before handshake
		`{"type":"handshake","protocol_version":"contextgraph/1.7","future":{"x":[1]}}`,
		``, `   `,
		"{\"type\":\"query\",\"query\":\"\xff\"}",
		`not json {{{`,
		`{"no_type":1}`,
		`{"type":"frobnicate"}`,
		`{"type":"frobnicate","id":"u1"}`,
		`{"type":"frames","result":{"frames":[],"truncated":false}}`,
		`{"type":"query","id":"q1","future":1,"query":{"goal":"x","query_text":"retry","max_frames":2,"max_tokens":100000,"x":{"y":{"z":[{}]}}}}`,
		`{"type":"query","id":"q2","query":{"goal":"x","max_frames":-1,"max_tokens":10}}`,
		`{"type":"query","id":"q3","query":{"goal":"x","max_frames":4294967296,"max_tokens":10}}`,
		`{"type":"query","id":"q4","query":{"goal":"x","max_frames":1,"max_tokens":10,"as_of":"2026-07-01T00:00:00+02:00"}}`,
		`{"type":"verify","id":"v1","request":{"frames":[{"provider_id":"cmbnode","frame_id":"memory:cmb1-root","content_digest":"sha256:00"}]}}`,
		`{"type":"shutdown"}`,
		`{"type":"query","id":"after","query":{"goal":"x","max_frames":1,"max_tokens":10}}`,
	}, "\n") + "\n"
	got := serveLines(t, e, in)
	want := []struct{ typ, id, code string }{
		{"error", "early", "bad_request"},
		{"handshake_ack", "", ""},
		{"error", "", "bad_request"}, // invalid UTF-8
		{"error", "", "bad_request"}, // not JSON
		{"error", "", "bad_request"}, // no type
		{"error", "u1", "bad_request"},
		{"frames", "q1", ""},
		{"error", "q2", "bad_request"},
		{"error", "q3", "bad_request"},
		{"error", "q4", "bad_request"},
		{"verified", "v1", ""},
	}
	// Queries and verifies run concurrently and may overtake the
	// immediate error replies (correlation allows it), so compare as sets.
	key := func(typ, id, code any) string { return fmt.Sprint(typ, "|", id, "|", code) }
	var gotKeys, wantKeys []string
	for _, g := range got {
		id, code := g["id"], g["code"]
		if id == nil {
			id = ""
		}
		if code == nil {
			code = ""
		}
		gotKeys = append(gotKeys, key(g["type"], id, code))
		if g["type"] == "handshake_ack" && g["protocol_version"] != cgp.ProtocolVersion {
			t.Errorf("ack version %v", g["protocol_version"])
		}
	}
	for _, w := range want {
		wantKeys = append(wantKeys, key(w.typ, w.id, w.code))
	}
	sort.Strings(gotKeys)
	sort.Strings(wantKeys)
	if strings.Join(gotKeys, "\n") != strings.Join(wantKeys, "\n") {
		t.Errorf("replies\n got %v\nwant %v", gotKeys, wantKeys)
	}
	if got[0]["id"] != "early" || got[1]["type"] != "handshake_ack" {
		t.Errorf("synchronous replies out of order: %v %v", got[0], got[1])
	}
}

func TestHandshakeVersionFamilies(t *testing.T) {
	e := mustEngine(t, smallStore())
	for v, wantAck := range map[string]bool{"contextgraph/1.0-draft": true, "contextgraph/1.0": true, "contextgraph/1.7": true,
		"contextgraph/2.0": false, "contextgraph/10.0": false, "garbage": false, "": false} {
		got := serveLines(t, e, `{"type":"handshake","protocol_version":`+jsonStr(v)+"}\n")
		if ack := got[0]["type"] == "handshake_ack"; ack != wantAck || (!ack && got[0]["code"] != "incompatible_version") {
			t.Errorf("%q: %v", v, got[0])
		}
	}
}

func TestServeLongLineAndEOF(t *testing.T) {
	e := mustEngine(t, smallStore())
	long := `{"type":"handshake","protocol_version":"contextgraph/1.0","pad":"` + strings.Repeat("a", cgp.MaxInputLine) + `"}`
	// The last line has no newline: it is still served before EOF returns.
	got := serveLines(t, e, long+"\n"+`{"type":"handshake","protocol_version":"contextgraph/1.0"}`)
	if len(got) != 2 || got[0]["code"] != "bad_request" || got[1]["type"] != "handshake_ack" {
		t.Fatalf("replies: %v", got)
	}
}

// blockingHandler answers queries only when released, to prove shutdown
// does not wait for work in flight and that concurrent replies are whole
// lines.
type blockingHandler struct {
	cgp.Handler
	release chan struct{}
}

func (b blockingHandler) Query(ctx context.Context, q *cgp.ContextQuery) (*cgp.ContextQueryResult, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.Handler.Query(ctx, q)
}

func TestServeShutdownPromptAndWholeLines(t *testing.T) {
	e := mustEngine(t, smallStore())
	h := blockingHandler{Handler: e, release: make(chan struct{})}
	pr, pw := io.Pipe()
	out := &syncBuf{}
	done := make(chan error, 1)
	go func() { done <- cgp.Serve(context.Background(), pr, out, h, cgp.ServeOptions{Concurrency: 3}) }()
	write := func(s string) {
		if _, err := pw.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"type":"handshake","protocol_version":"contextgraph/1.0"}`)
	for _, id := range []string{"a", "b", "c"} {
		write(`{"type":"query","id":"` + id + `","query":{"goal":"x","query_text":"retry","max_frames":3,"max_tokens":100000}}`)
	}
	close(h.release)
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == 4 })
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Fatalf("interleaved or partial line: %.100q", l)
		}
	}
	t0 := time.Now()
	write(`{"type":"shutdown"}`)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after shutdown: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
	if time.Since(t0) > time.Second {
		t.Errorf("shutdown took %v", time.Since(t0))
	}
}

type syncBuf struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached")
}

func TestHTTPStatusCodes(t *testing.T) {
	e := mustEngine(t, smallStore())
	srv := httptest.NewServer(cgp.NewHTTPHandler(e, cgp.HTTPOptions{BearerToken: "s3cret"}))
	defer srv.Close()
	post := func(body string, auth bool) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if auth {
			req.Header.Set("Authorization", "Bearer s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if len(b) > 0 && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode, m
	}
	cases := []struct {
		body   string
		auth   bool
		status int
		typ    string
		code   string
	}{
		{`{"type":"handshake","protocol_version":"contextgraph/1.0"}`, false, 401, "error", "unauthorized"},
		{`{"type":"handshake","protocol_version":"contextgraph/1.0"}`, true, 200, "handshake_ack", ""},
		{`{"type":"query","id":"q","query":{"goal":"x","query_text":"retry","max_frames":1,"max_tokens":1000}}`, true, 200, "frames", ""},
		{`{"type":"query","id":"q","query":{"goal":"","max_frames":1,"max_tokens":1000}}`, true, 200, "error", "bad_request"},
		{`{"type":"handshake","protocol_version":"contextgraph/2.0"}`, true, 200, "error", "incompatible_version"},
		{`{"type":"frobnicate","id":"z"}`, true, 200, "error", "bad_request"},
		{`{"type":"frobnicate"}`, true, 204, "", ""},
		{`{"type":"shutdown"}`, true, 204, "", ""},
		{`not json`, true, 400, "error", "bad_request"},
		{``, true, 400, "error", "bad_request"},
		{`{"x":1}`, true, 400, "error", "bad_request"},
		{`{"type":"handshake","pad":"` + strings.Repeat("a", cgp.MaxHTTPBody) + `"}`, true, 400, "error", "bad_request"},
	}
	for i, c := range cases {
		st, m := post(c.body, c.auth)
		if st != c.status || (c.typ != "" && m["type"] != c.typ) || (c.code != "" && m["code"] != c.code) || (c.typ == "" && m != nil) {
			t.Errorf("case %d (%.40s): %d %v", i, c.body, st, m)
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
}

// inProcRemote stands in for the daemon socket: it serves the socket's
// query/verify payloads with an Engine, as the daemon will.
type inProcRemote struct {
	e    *cgp.Engine
	down bool
}

func (r inProcRemote) Query(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	if r.down {
		return nil, errors.New("dial unix /home/x/.cmbnode/daemon.sock: connect: no such file or directory")
	}
	q, err := cgp.DecodeQuery(raw)
	if err != nil {
		return nil, err
	}
	res, err := r.e.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (r inProcRemote) Verify(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	if r.down {
		return nil, errors.New("connection refused")
	}
	req, err := cgp.DecodeVerifyRequest(raw)
	if err != nil {
		return nil, err
	}
	resp, err := r.e.Verify(ctx, req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

func TestRelayHandler(t *testing.T) {
	e := mustEngine(t, smallStore())
	ack, err := cgp.AckFor(cgp.Config{ProviderVersion: "test", SigningKey: cgptest.TestKey()})
	if err != nil {
		t.Fatal(err)
	}
	if ack.AttesterKeys[0] != e.Ack().AttesterKeys[0] {
		t.Fatalf("shim ack key %v differs from the engine's %v", ack.AttesterKeys[0], e.Ack().AttesterKeys[0])
	}
	in := `{"type":"handshake","protocol_version":"contextgraph/1.0-draft"}
{"type":"query","id":"q","query":{"goal":"x","query_text":"retry","max_frames":2,"max_tokens":100000}}
{"type":"query","id":"bad","query":{"goal":"x","max_frames":1,"max_tokens":10,"embedding":[1]}}
{"type":"verify","id":"v","request":{"frames":[{"provider_id":"cmbnode","frame_id":"memory:cmb1-gone"}]}}
`
	up := serveLines(t, &cgp.RelayHandler{AckInfo: ack, Remote: inProcRemote{e: e}, Socket: "/run/x.sock"}, in)
	direct := serveLines(t, e, in)
	if len(up) != 4 {
		t.Fatalf("relay replies: %v", up)
	}
	byID := func(rs []map[string]any) map[string]string {
		m := map[string]string{}
		for _, r := range rs {
			b, _ := json.Marshal(r)
			m[fmt.Sprint(r["id"])] = string(b)
		}
		return m
	}
	relayed, inproc := byID(up), byID(direct)
	for id, a := range relayed {
		if a != inproc[id] {
			t.Errorf("relay reply %s differs from in-process:\n%s\n%s", id, a, inproc[id])
		}
	}
	down := serveLines(t, &cgp.RelayHandler{AckInfo: ack, Remote: inProcRemote{down: true}, Socket: "/run/x.sock"}, in)
	if down[0]["type"] != "handshake_ack" {
		t.Errorf("handshake without a daemon: %v", down[0])
	}
	for _, r := range down[1:] {
		msg, _ := r["message"].(string)
		if r["type"] != "error" || r["code"] != "unavailable" || !strings.Contains(msg, "/run/x.sock") {
			t.Errorf("no daemon: %v", r)
		}
	}
}

func TestServeShutdownAbandonsStuckRequest(t *testing.T) {
	e := mustEngine(t, smallStore())
	h := blockingHandler{Handler: e, release: make(chan struct{})} // never released
	in := `{"type":"handshake","protocol_version":"contextgraph/1.0"}
{"type":"query","id":"stuck","query":{"goal":"x","max_frames":1,"max_tokens":10}}
{"type":"shutdown"}
`
	t0 := time.Now()
	var out syncBuf
	if err := cgp.Serve(context.Background(), strings.NewReader(in), &out, h, cgp.ServeOptions{ShutdownGrace: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("shutdown with a stuck request took %v", d)
	}
	if strings.Count(out.String(), "\n") != 1 {
		t.Errorf("want only the ack: %q", out.String())
	}
}
