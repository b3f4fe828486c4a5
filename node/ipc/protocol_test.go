package ipc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/identity"
)

func TestRememberGetLineageRecall(t *testing.T) {
	ts := startServer(t, nil)
	r := dialRaw(t, ts.path)

	m := r.call(`{"type":"remember","id":"a1","fields":{"focus":"socket protocol design","intent":"teach agents","mood":{"text":"curious","valence":0.4,"arousal":-0.2}}}`)
	wantResult(t, m, "remember")
	if m["id"] != "a1" || m["duplicate"] != false {
		t.Fatalf("reply %v: want id a1 echoed and duplicate false", m)
	}
	parent, _ := m["key"].(string)
	if !strings.HasPrefix(parent, "cmb1-") {
		t.Fatalf("key %q is not a cmb1- address", parent)
	}

	// The same fields again: the same address, now a duplicate. A numeric id echoes as a number.
	m = r.call(`{"type":"remember","id":7,"fields":{"focus":"socket protocol design","intent":"teach agents","mood":{"text":"curious","valence":0.4,"arousal":-0.2}}}`)
	if m["key"] != parent || m["duplicate"] != true || m["id"] != float64(7) {
		t.Fatalf("second remember: %v", m)
	}

	// The reference runtime's shape: categories, {key} parents, no id.
	m = r.call(`{"type":"remember","categories":{"focus":"a remix of the design"},"parents":[{"key":"` + parent + `"}]}`)
	wantResult(t, m, "remember")
	if _, has := m["id"]; has {
		t.Fatalf("a request without id got one back: %v", m)
	}
	child := m["key"].(string)

	m = r.call(`{"type":"get","key":"` + parent + `"}`)
	wantResult(t, m, "get")
	rec, err := json.Marshal(m["cmb"])
	if err != nil {
		t.Fatal(err)
	}
	got, err := cmb.Decode(rec)
	if err != nil {
		t.Fatalf("get returned no record: %v (%v)", err, m)
	}
	if got.Key != parent || got.Fields[cmb.Focus].Text != "socket protocol design" || got.Fields[cmb.Issue].Text != cmb.Neutral {
		t.Fatalf("get: wrong record %s", rec)
	}
	if v := got.Fields[cmb.Mood].Valence; v == nil || *v != 0.4 {
		t.Fatalf("mood valence lost: %s", rec)
	}
	if err := got.Verify(cmb.Policy{Audience: cmb.Audience{Group: "default"}, AuthorKey: ts.node.Identity().PublicKey()}); err != nil {
		t.Fatalf("stored record does not verify against the node key: %v", err)
	}
	if m["source"] != node.SourceLocal {
		t.Fatalf("get source = %v", m["source"])
	}

	m = r.call(`{"type":"lineage","key":"` + parent + `"}`)
	wantResult(t, m, "lineage")
	if fmt.Sprint(m["descendants"]) != "["+child+"]" || fmt.Sprint(m["ancestors"]) != "[]" {
		t.Fatalf("lineage of parent: %v", m)
	}
	m = r.call(`{"type":"lineage","key":"` + child + `","depth":1}`)
	if fmt.Sprint(m["ancestors"]) != "["+parent+"]" {
		t.Fatalf("lineage of child: %v", m)
	}

	m = r.call(`{"type":"recall","query":"remix","limit":5}`)
	wantResult(t, m, "recall")
	res := m["results"].([]any)
	// The parent shares no word with the query: it comes second, on its
	// child's evidence (lineage neighbours, node/rank.go).
	if len(res) != 2 || res[0].(map[string]any)["key"] != child || res[1].(map[string]any)["key"] != parent {
		t.Fatalf("recall remix: %v", m)
	}
	hit := res[0].(map[string]any)
	childScore, parentScore := hit["score"].(float64), res[1].(map[string]any)["score"].(float64)
	if !(childScore > parentScore && childScore <= 1 && parentScore > 0) {
		t.Fatalf("scores child %v parent %v", childScore, parentScore)
	}
	m = r.call(fmt.Sprintf(`{"type":"recall","query":"remix","min_score":%v}`, (childScore+parentScore)/2))
	if res := m["results"].([]any); len(res) != 1 || res[0].(map[string]any)["key"] != child {
		t.Fatalf("recall with min_score between the two: %v", m)
	}
	m = r.call(`{"type":"recall","query":"remix","min_score":1.5}`)
	if m["type"] != "error" || m["code"] != "bad_request" {
		t.Fatalf("min_score 1.5: %v", m)
	}
	for _, k := range []string{"createdBy", "createdAt", "group", "fields", "score"} {
		if _, ok := hit[k]; !ok {
			t.Fatalf("recall hit lacks %s: %v", k, hit)
		}
	}
	m = r.call(`{"type":"recall","query":"nothing-matches-this"}`)
	if res := m["results"].([]any); len(res) != 0 {
		t.Fatalf("recall with no match: %v", m)
	}
}

func TestPublish(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := ctxT(t)
	agent, err := identity.Create(t.TempDir(), "agent", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var f cmb.Fields
	f[cmb.Focus].Text = "signed by the agent itself"
	rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "default", CreatedBy: agent.NodeID, CreatedAt: time.Now().UnixMilli()}, agent.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Publish(ctx, rec.Encode(), agent.PublicKeyB64())
	if err != nil || res.Key != rec.Key || res.Duplicate {
		t.Fatalf("publish: %+v %v", res, err)
	}
	if res, err = c.Publish(ctx, rec.Encode(), agent.PublicKeyB64()); err != nil || !res.Duplicate {
		t.Fatalf("publish again: %+v %v", res, err)
	}
	g, err := c.Get(ctx, rec.Key)
	if err != nil || !bytes.Equal(g.CMB, rec.Encode()) {
		t.Fatalf("get of published record: %s %v", g.CMB, err)
	}

	tampered := bytes.Replace(rec.Encode(), []byte("signed by the agent"), []byte("signed by an imposter"), 1)
	_, err = c.Publish(ctx, tampered, agent.PublicKeyB64())
	wantCode(t, err, CodeRejected)
	other, _ := identity.Create(t.TempDir(), "other", rand.Reader)
	_, err = c.Publish(ctx, rec.Encode(), other.PublicKeyB64())
	wantCode(t, err, CodeRejected)
	_, err = c.Publish(ctx, rec.Encode(), "not a key")
	wantCode(t, err, CodeBadRequest)
	_, err = c.Call(ctx, "publish", map[string]string{"publicKey": agent.PublicKeyB64()})
	wantCode(t, err, CodeBadRequest)
	_, err = c.Publish(ctx, json.RawMessage(`{"key":"x"}`), agent.PublicKeyB64())
	wantCode(t, err, CodeBadRequest)
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("want error code %s, got %v", code, err)
	}
}

// fakeCGP answers query and verify the way the CGP engine will.
type fakeCGP struct{}

func (fakeCGP) Query(_ context.Context, q json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"frames":[],"echo":` + string(q) + `}`), nil
}

func (fakeCGP) Verify(context.Context, json.RawMessage) (json.RawMessage, error) {
	return nil, &Error{Code: CodeBadRequest, Message: "frame_id is required"}
}

func TestQueryAndVerify(t *testing.T) {
	plain := startServer(t, nil)
	r := dialRaw(t, plain.path)
	wantError(t, r.call(`{"type":"query","id":1,"query":{"goal":"x"}}`), CodeUnavailable)
	wantError(t, r.call(`{"type":"verify","id":2,"request":{}}`), CodeUnavailable)

	withCGP := startServer(t, func(o *Options) { o.CGP = fakeCGP{} })
	r = dialRaw(t, withCGP.path)
	m := r.call(`{"type":"query","id":"q","query":{"goal":"recent work"}}`)
	wantResult(t, m, "query")
	if m["id"] != "q" || m["result"].(map[string]any)["echo"].(map[string]any)["goal"] != "recent work" {
		t.Fatalf("query relayed wrongly: %v", m)
	}
	m = r.call(`{"type":"verify","id":"v","request":{}}`)
	wantError(t, m, CodeBadRequest)
	if m["id"] != "v" || m["action"] != "verify" {
		t.Fatalf("verify error lost id or action: %v", m)
	}
	wantError(t, r.call(`{"type":"query"}`), CodeBadRequest)
	wantError(t, r.call(`{"type":"verify","request":"x"}`), CodeBadRequest)
}

func TestBadRequestsKeepTheConnection(t *testing.T) {
	ts := startServer(t, nil)
	r := dialRaw(t, ts.path)
	cases := []struct{ msg, code string }{
		{`{"type":"remember",`, CodeBadRequest},
		{`not json at all`, CodeBadRequest},
		{`[1,2,3]`, CodeBadRequest},
		{`null`, CodeBadRequest},
		{`{"id":"no-type"}`, CodeBadRequest},
		{`{"type":42}`, CodeBadRequest},
		{`{"type":"remember","id":{"nested":true}}`, CodeBadRequest},
		{`{"type":"register","id":"u"}`, CodeUnknownRequest},
		{`{"type":"remember","id":"r"}`, CodeBadRequest},
		{`{"type":"remember","fields":"focus"}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focs":"typo"}}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":7}}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":{"txt":"x"}}}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":{"text":"x","valence":0.1}}}`, CodeBadRequest},
		{`{"type":"remember","fields":{"mood":{"text":"x","valence":3}}}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":"x"},"categories":{"focus":"y"}}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":"x"},"parents":"cmb1-00"}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":"x"},"parents":[{"nokey":1}]}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":"x"},"parents":["not-a-key"]}`, CodeBadRequest},
		{`{"type":"remember","fields":{"focus":"x"},"parents":["cmb1-` + strings.Repeat("ab", 32) + `"]}`, CodeNotFound},
		{`{"type":"remember","fields":{"focus":"x"},"to":7}`, CodeBadRequest},
		// A "to" that is no nodeId is a peer name; none is known here.
		{`{"type":"remember","fields":{"focus":"x"},"to":"not-a-node"}`, CodeNotFound},
		{`{"type":"remember","fields":{"focus":"x"},"to":"0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f"}`, CodeNotFound},
		{`{"type":"recall","query":3}`, CodeBadRequest},
		{`{"type":"recall","query":"x","limit":"ten"}`, CodeBadRequest},
		{`{"type":"recall","query":"x","limit":100000}`, CodeBadRequest},
		{`{"type":"get"}`, CodeBadRequest},
		{`{"type":"get","key":"cmb1-` + strings.Repeat("cd", 32) + `"}`, CodeNotFound},
		{`{"type":"lineage"}`, CodeBadRequest},
		{`{"type":"lineage","key":"cmb1-` + strings.Repeat("cd", 32) + `"}`, CodeNotFound},
		{`{"type":"lineage","key":"x","depth":-1}`, CodeBadRequest},
	}
	for _, c := range cases {
		m := r.call(c.msg)
		if m["type"] != "error" || m["code"] != c.code {
			t.Errorf("%s: want %s, got %v", c.msg, c.code, m)
		}
	}
	// An error still echoes the id when one was readable.
	m := r.call(`{"type":"frobnicate","id":"x9"}`)
	wantError(t, m, CodeUnknownRequest)
	if m["id"] != "x9" {
		t.Fatalf("unknown_request lost the id: %v", m)
	}
	// Blank lines are skipped, CRLF is tolerated, and the connection still works.
	r.sendRaw([]byte("\n\r\n"))
	r.sendRaw([]byte(`{"type":"status","id":"s"}` + "\r\n"))
	m = r.recv()
	wantResult(t, m, "status")
	if m["id"] != "s" {
		t.Fatalf("status after errors: %v", m)
	}
}

func TestOversizedMessages(t *testing.T) {
	ts := startServer(t, nil)
	t.Run("ndjson", func(t *testing.T) {
		r := dialRaw(t, ts.path)
		big := `{"type":"remember","fields":{"focus":"` + strings.Repeat("x", MaxMessage) + `"}}` + "\n"
		r.sendRaw([]byte(big))
		wantError(t, r.recv(), CodeTooLarge)
		// Exactly at the limit is allowed through to the handler (which rejects the field size).
		atLimit := `{"type":"remember","fields":{"focus":"` + strings.Repeat("y", MaxMessage-len(`{"type":"remember","fields":{"focus":""}}`)) + `"}}`
		if len(atLimit) != MaxMessage {
			t.Fatalf("test message is %d bytes", len(atLimit))
		}
		wantError(t, r.call(atLimit), CodeBadRequest)
		wantResult(t, r.call(`{"type":"status"}`), "status")
	})
	t.Run("framed", func(t *testing.T) {
		r := dialRaw(t, ts.path)
		r.framed = true
		m := r.call(`{"type":"status","id":1}`)
		wantResult(t, m, "status")
		// Over the cap: the payload is skipped and the next frame still parses.
		hdr := binary.BigEndian.AppendUint32(nil, MaxMessage+1)
		r.sendRaw(append(hdr, bytes.Repeat([]byte("z"), MaxMessage+1)...))
		wantError(t, r.recv(), CodeTooLarge)
		m = r.call(`{"type":"remember","id":2,"fields":{"focus":"framed clients work too"}}`)
		wantResult(t, m, "remember")
		// An empty frame is a malformed request, not the end of the stream.
		r.sendRaw([]byte{0, 0, 0, 0})
		wantError(t, r.recv(), CodeBadRequest)
		wantResult(t, r.call(`{"type":"peers"}`), "peers")
	})
}

func TestStatusAndPeers(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := ctxT(t)
	for i := range 3 {
		if _, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprint("note ", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := ts.node.Identity()
	if st.NodeID != id.NodeID || st.Name != id.Name || st.Group != "default" || st.CMBs != 3 || st.Peers != 0 || st.Addrs == nil || st.SocketClients != 1 {
		t.Fatalf("status: %+v", st)
	}
	raw, _ := c.Call(ctx, "status", nil)
	for _, k := range []string{"nodeId", "peerId", "name", "group", "addrs", "peers", "cmbs"} {
		if !bytes.Contains(raw, []byte(`"`+k+`":`)) {
			t.Fatalf("status reply lacks %s: %s", k, raw)
		}
	}
	peers, err := c.Peers(ctx)
	if err != nil || peers == nil || len(peers) != 0 {
		t.Fatalf("peers with no mesh: %v %v", peers, err)
	}
	raw, _ = c.Call(ctx, "peers", nil)
	if !bytes.Contains(raw, []byte(`"peers":[]`)) {
		t.Fatalf("peers reply: %s", raw)
	}
}

// TestListenEvents drives every event of the contract through a listener.
func TestListenEvents(t *testing.T) {
	ts := startServer(t, nil)
	r := dialRaw(t, ts.path)
	m := r.call(`{"type":"listen","id":"l"}`)
	wantResult(t, m, "listen")
	if m["status"] != "subscribed" || m["id"] != "l" {
		t.Fatalf("listen reply: %v", m)
	}
	// Listening twice does not double the events.
	wantResult(t, r.call(`{"type":"listen"}`), "listen")
	waitFor(t, "one subscriber", func() bool { return ts.node.Events().Subscribers() == 1 })

	// A record from another member, through the receive pipeline.
	peer, _ := identity.Create(t.TempDir(), "peer", rand.Reader)
	var f cmb.Fields
	f[cmb.Focus].Text = "news from a peer"
	rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "default", CreatedBy: peer.NodeID, CreatedAt: 1751000000000}, peer.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	chk, err := ts.node.Check(ctx, rec, node.Source{PeerID: "12D3KooWpeer", NodeID: peer.NodeID, AuthorKey: peer.PublicKeyB64(), Via: "gossip"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.node.Accept(ctx, chk); err != nil {
		t.Fatal(err)
	}
	ev := r.recv()
	data, _ := ev["data"].(map[string]any)
	if ev["type"] != "event" || ev["event"] != "cmb-accepted" || data["key"] != rec.Key {
		t.Fatalf("cmb-accepted: %v", ev)
	}
	for _, k := range []string{"key", "source", "createdBy", "createdAt", "group", "fields", "directed", "decision", "drift"} {
		if _, ok := data[k]; !ok {
			t.Fatalf("cmb-accepted data lacks %s: %v", k, data)
		}
	}
	if data["fields"].(map[string]any)["focus"].(map[string]any)["text"] != "news from a peer" {
		t.Fatalf("cmb-accepted fields: %v", data["fields"])
	}

	// Peer events come from the mesh; the socket forwards whatever it publishes.
	info := node.PeerInfo{NodeID: peer.NodeID, Name: "peer", PeerID: "12D3KooWpeer"}
	ts.node.Events().Publish(events.Event{Name: events.PeerJoined, Data: info})
	ts.node.Events().Publish(events.Event{Name: events.PeerLeft, Data: info})
	for _, name := range []string{"peer-joined", "peer-left"} {
		ev := r.recv()
		data, _ := ev["data"].(map[string]any)
		if ev["event"] != name || data["nodeId"] != peer.NodeID || data["name"] != "peer" || data["peerId"] != "12D3KooWpeer" {
			t.Fatalf("%s: %v", name, ev)
		}
	}
	// Requests still work on a listening connection.
	wantResult(t, r.call(`{"type":"status"}`), "status")

	// The typed client sees the same events.
	c := dialClient(t, ts.path)
	if err := c.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	ts.node.Events().Publish(events.Event{Name: events.PeerJoined, Data: info})
	select {
	case ev := <-c.Events():
		if ev.Event != "peer-joined" || !bytes.Contains(ev.Data, []byte(peer.NodeID)) {
			t.Fatalf("client event: %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("client got no event")
	}
}

func TestSocketFile(t *testing.T) {
	ts := startServer(t, nil)
	fi, err := os.Stat(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want a 0600 socket", fi.Mode())
	}
	// A second server on a live socket is refused and names this process.
	_, err = Listen(Options{Path: ts.path, Node: ts.node})
	var inUse *InUseError
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() || !strings.Contains(err.Error(), ts.path) {
		t.Fatalf("second Listen: %v, want an InUseError naming pid %d", err, os.Getpid())
	}
	// The first one is unharmed.
	r := dialRaw(t, ts.path)
	wantResult(t, r.call(`{"type":"status"}`), "status")
}

func TestStaleSocketIsReplaced(t *testing.T) {
	ts := startServer(t, nil)
	path := ts.home + "/stale.sock"
	// A socket file nobody accepts on: what a SIGKILLed daemon leaves.
	ln, err := netListenUnixNoUnlink(path)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	srv, err := Listen(Options{Path: path, Node: ts.node})
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	r := dialRaw(t, path)
	wantResult(t, r.call(`{"type":"status"}`), "status")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left after Serve returned: %v", err)
	}

	notSock := ts.home + "/plain-file"
	os.WriteFile(notSock, []byte("x"), 0o600)
	if _, err := Listen(Options{Path: notSock, Node: ts.node}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(notSock); string(b) != "x" {
		t.Fatal("Listen damaged a file that is not a socket")
	}
}

func TestDialWithoutDaemon(t *testing.T) {
	_, err := Dial(context.Background(), t.TempDir()+"/daemon.sock")
	if !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("Dial with no daemon: %v", err)
	}
}

func TestDialAStaleSocketIsNoDaemon(t *testing.T) {
	path := t.TempDir() + "/daemon.sock"
	ln, err := netListenUnixNoUnlink(path)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := Dial(context.Background(), path); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("Dial of a stale socket: %v", err)
	}
}

// The reply to a remember or publish, written without reflection, is
// what encoding/json writes for its node.Result: every combination of the
// optional members, and every field of Result set (a field added to
// Result and not to appendResultMembers fails here).
func TestResultMembersAreJSONs(t *testing.T) {
	yes, no := true, false
	cases := []node.Result{
		{Key: "cmb1-00ff"},
		{Key: "cmb-ab", Duplicate: true, SameAuthor: &yes},
		{Key: "cmb1-01", Duplicate: true, SameAuthor: &no, Asserted: true},
		{Key: "cmb1-02", Duplicate: true, Forgotten: true},
		{Key: `odd "<key>" & é`},
	}
	var full node.Result
	v := reflect.ValueOf(&full).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString("cmb1-ff")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		default:
			t.Fatalf("node.Result.%s is a %s: teach appendResultMembers and this test about it", v.Type().Field(i).Name, f.Kind())
		}
	}
	cases = append(cases, full)
	for _, r := range cases {
		got, err := encodeResult(TypeRemember, json.RawMessage(`7`), r)
		if err != nil {
			t.Fatal(err)
		}
		type reply struct {
			Type   string `json:"type"`
			Action string `json:"action"`
			ID     int    `json:"id"`
			node.Result
		}
		want, _ := json.Marshal(reply{"result", TypeRemember, 7, r})
		if !bytes.Equal(got, want) {
			t.Errorf("reply\n%s\nwant\n%s", got, want)
		}
	}
}

// appendJSONString writes what json.Marshal writes, for plain strings and
// for every kind of string it escapes.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "remember", "cmb1-0a", "a\"b", `a\b`, "<&>", "tab\there", "é", "\u2028", "bad \xff utf-8", "\x00", "~ !#$%'()*+,-./:;=?@[]^_`{|}"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
}
