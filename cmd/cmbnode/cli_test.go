package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
)

func TestCLIAgainstADaemon(t *testing.T) {
	home := t.TempDir()
	startDaemon(t, home)
	id, err := identity.Load(home)
	if err != nil {
		t.Fatalf("daemon did not create the identity: %v", err)
	}
	h := []string{"--home", home}
	call := func(args ...string) result {
		t.Helper()
		return bin(t, "", append(args, h...)...)
	}

	r := call("status")
	if r.code != 0 || !strings.Contains(r.stdout, id.NodeID) || !strings.Contains(r.stdout, "cmbs       0") {
		t.Fatalf("status: %+v", r)
	}
	r = call("status", "--json")
	var st map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st["nodeId"] != id.NodeID || st["group"] != "default" {
		t.Fatalf("status --json: %+v", r)
	}
	if _, has := st["type"]; has || strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
		t.Fatalf("status --json is not one bare object: %s", r.stdout)
	}

	r = call("remember", "--focus", "plan the release", "--intent", "ship on friday", "--mood", "hopeful", "--valence", "0.6", "--arousal", "0.1")
	parent := strings.TrimSpace(r.stdout)
	if r.code != 0 || cmb.SchemeOf(parent) != cmb.SchemeV1 {
		t.Fatalf("remember: %+v", r)
	}
	r = call("remember", "--json", "--focus", "release slipped to monday", "--parent", parent)
	var rem struct {
		Key       string `json:"key"`
		Duplicate bool   `json:"duplicate"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rem) != nil || rem.Duplicate || cmb.SchemeOf(rem.Key) != cmb.SchemeV1 {
		t.Fatalf("remember --json: %+v", r)
	}
	child := rem.Key
	r = call("remember", "--focus", "plan the release", "--intent", "ship on friday", "--mood", "hopeful", "--valence", "0.6", "--arousal", "0.1")
	if r.code != 0 || strings.TrimSpace(r.stdout) != parent || !strings.Contains(r.stderr, "already held") {
		t.Fatalf("remembering the same thing twice: %+v", r)
	}

	r = call("recall", "release", "--limit", "5")
	if r.code != 0 || !strings.Contains(r.stdout, parent) || !strings.Contains(r.stdout, child) || !strings.Contains(r.stdout, "just now") || !strings.HasPrefix(r.stdout, "SCORE") {
		t.Fatalf("recall: %+v", r)
	}
	r = call("recall", "--json", "monday")
	var rec struct {
		Results []struct {
			Key   string  `json:"key"`
			Score float64 `json:"score"`
		} `json:"results"`
	}
	// The parent does not say "monday": it follows its child, on the
	// child's evidence (a thread is the unit of a conversation).
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || len(rec.Results) != 2 || rec.Results[0].Key != child || rec.Results[1].Key != parent {
		t.Fatalf("recall --json: %+v", r)
	}
	if r = call("recall", "zebra"); r.code != 0 || !strings.Contains(r.stdout, "no matches") {
		t.Fatalf("recall with no match: %+v", r)
	}

	r = call("get", parent)
	for _, want := range []string{"plan the release", "ship on friday", "hopeful (valence 0.6, arousal 0.1)", "issue        neutral", id.NodeID, "from local"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get lacks %q: %+v", want, r)
		}
	}
	// get --json is the record itself: it verifies offline against the node's key.
	r = call("get", "--json", child)
	if r.code != 0 {
		t.Fatalf("get --json: %+v", r)
	}
	v := bin(t, r.stdout, "cmb", "verify", "--pubkey", id.PublicKeyB64())
	if v.code != 0 || !strings.Contains(v.stdout, "accepted "+child) {
		t.Fatalf("record from get --json does not verify: %+v", v)
	}

	r = call("lineage", "--json", child)
	var lin struct {
		Ancestors   []string `json:"ancestors"`
		Descendants []string `json:"descendants"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &lin) != nil || len(lin.Ancestors) != 1 || lin.Ancestors[0] != parent || len(lin.Descendants) != 0 {
		t.Fatalf("lineage --json: %+v", r)
	}
	r = call("lineage", parent)
	if r.code != 0 || !strings.Contains(r.stdout, "descendants (1, nearest first)") || !strings.Contains(r.stdout, child) || !strings.Contains(r.stdout, "release slipped") {
		t.Fatalf("lineage: %+v", r)
	}

	if r = call("peers"); r.code != 0 || strings.TrimSpace(r.stdout) != "no peers" {
		t.Fatalf("peers: %+v", r)
	}
	if r = call("peers", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != `{"conflicts":[],"peers":[]}` {
		t.Fatalf("peers --json: %+v", r)
	}

	// Mistakes: usage errors exit 2, refusals by the daemon exit 1 naming the code.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"remember", "--intent", "no focus"}, 2, "--focus is required"},
		{[]string{"remember", "--focus", "x", "--valence", "2"}, 2, "[-1, 1]"},
		{[]string{"recall"}, 2, "give a query"},
		{[]string{"get"}, 2, "give one key"},
		// The daemon resolves keys and prefixes (node.ResolveKey).
		{[]string{"get", "not-a-key"}, 1, "neither a CMB key nor a key prefix"},
		{[]string{"get", "cmb1-" + strings.Repeat("0", 64)}, 1, "(not_found)"},
		{[]string{"remember", "--focus", "x", "--parent", "cmb1-" + strings.Repeat("1", 64)}, 1, "(not_found)"},
		{[]string{"remember", "--focus", "x", "--to", "nobody"}, 1, `no peer named "nobody"`},
		{[]string{"status", "extra"}, 2, "unexpected argument"},
		{[]string{"trust", "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f"}, 2, "nodeId and the Ed25519 key"},
		{[]string{"trust", "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f", "not-a-key"}, 1, "(bad_request)"},
	} {
		r := call(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: want exit %d and one line with %q, got %+v", c.args, c.code, c.want, r)
		}
	}
}

// TestCLIRecallFindsWhatWasMeant: recall finds other forms of a query's
// words and answers a question in plain words, through a real daemon.
func TestCLIRecallFindsWhatWasMeant(t *testing.T) {
	home := t.TempDir()
	startDaemon(t, home)
	h := []string{"--home", home}
	call := func(args ...string) result {
		t.Helper()
		return bin(t, "", append(args, h...)...)
	}
	keys := map[string]string{}
	for _, focus := range []string{"release plan drafted", "ship friday", "lunch order for the team", "the printer jammed again", "what a week it was"} {
		r := call("remember", "--focus", focus)
		if r.code != 0 {
			t.Fatalf("remember %q: %+v", focus, r)
		}
		keys[focus] = strings.TrimSpace(r.stdout)
	}
	type hits struct {
		Results []struct {
			Key   string  `json:"key"`
			Score float64 `json:"score"`
		} `json:"results"`
	}
	for _, c := range []struct{ query, want string }{
		{"releases", "release plan drafted"},
		{"shipping", "ship friday"},
		{"what did we decide about the release?", "release plan drafted"},
	} {
		r := call("recall", "--json", c.query)
		var got hits
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got.Results) == 0 || got.Results[0].Key != keys[c.want] {
			t.Errorf("recall %q: want %q (%s) first, got %+v", c.query, c.want, keys[c.want], r)
			continue
		}
		if s := got.Results[0].Score; s <= 0 || s > 1 {
			t.Errorf("recall %q: score %v is not in (0,1]", c.query, s)
		}
		// Stop words alone find nothing: "what a week it was" is not an answer.
		for _, h := range got.Results {
			if h.Key == keys["what a week it was"] {
				t.Errorf("recall %q found the stop-word-only memory: %+v", c.query, got)
			}
		}
	}
	r := call("recall", "--json", "releases")
	var all hits
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &all) != nil || len(all.Results) == 0 {
		t.Fatalf("recall releases: %+v", r)
	}
	top := all.Results[0].Score
	if r := call("recall", "--min-score", strconv.FormatFloat(top+0.01, 'f', 3, 64), "releases"); r.code != 0 || !strings.Contains(r.stdout, "no matches") {
		t.Errorf("recall --min-score above the best score: %+v", r)
	}
	if r := call("recall", "--min-score", strconv.FormatFloat(top-0.01, 'f', 3, 64), "releases"); r.code != 0 || !strings.Contains(r.stdout, keys["release plan drafted"]) {
		t.Errorf("recall --min-score below the best score: %+v", r)
	}
	if r := call("recall", "--min-score", "2", "releases"); r.code != 2 || !strings.Contains(r.stderr, "--min-score") {
		t.Errorf("recall --min-score 2: %+v", r)
	}
}

func TestCLIWithoutADaemon(t *testing.T) {
	home := t.TempDir()
	sock := filepath.Join(home, "daemon.sock")
	for _, args := range [][]string{{"status"}, {"peers"}, {"remember", "--focus", "x"}, {"recall", "x"}, {"get", "cmb1-" + strings.Repeat("0", 64)}, {"lineage", "cmb1-" + strings.Repeat("0", 64)}} {
		r := bin(t, "", append(args, "--home", home)...)
		if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, sock) || !strings.Contains(r.stderr, "cmbnode daemon --home "+home) {
			t.Errorf("%v with no daemon: %+v", args, r)
		}
	}
}

func TestDaemonLifecycle(t *testing.T) {
	home := t.TempDir()
	// Flags override config.toml.
	if r := bin(t, "", "init", "--home", home, "--group", "alpha", "--name", "lifecycle"); r.code != 0 {
		t.Fatalf("init: %+v", r)
	}
	d := startDaemon(t, home, "--group", "beta", "--log-json", "--cgp-http", "127.0.0.1:0", "--listen", "/ip4/127.0.0.1/tcp/0", "--listen", "/ip4/127.0.0.1/udp/0/quic-v1")
	if r := bin(t, "", "status", "--json", "--home", home); !strings.Contains(r.stdout, `"group":"beta"`) || !strings.Contains(r.stdout, `"name":"lifecycle"`) {
		t.Fatalf("status after --group beta over config alpha: %+v", r)
	}
	fi, err := os.Stat(d.sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}

	// A second daemon on the same home is refused, naming the home and the pid.
	r := bin(t, "", "daemon", "--home", home)
	if r.code != 1 || !strings.Contains(r.stderr, home) || !strings.Contains(r.stderr, "pid "+strconv.Itoa(d.pid())) {
		t.Fatalf("second daemon: %+v", r)
	}
	// Bad flags are usage errors and start nothing.
	if r := bin(t, "", "daemon", "--home", t.TempDir(), "--log-level", "loud"); r.code != 2 {
		t.Fatalf("bad --log-level: %+v", r)
	}

	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: exit %v\n%s", err, d.logs)
	}
	if _, err := os.Stat(d.sock); !os.IsNotExist(err) {
		t.Fatalf("socket left after SIGTERM: %v", err)
	}
	logs := d.logs.String()
	for _, want := range []string{`"msg":"ready"`, `"msg":"stopped"`, `"msg":"CGP HTTP binding ready"`, `"msg":"mesh started"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}

	// SIGINT stops it as cleanly, and the store reopens with what it held.
	d = startDaemon(t, home)
	key := strings.TrimSpace(bin(t, "", "remember", "--home", home, "--focus", "kept across restarts").stdout)
	if err := d.stop(t, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: exit %v\n%s", err, d.logs)
	}
	startDaemon(t, home)
	if r := bin(t, "", "get", "--home", home, key); r.code != 0 || !strings.Contains(r.stdout, "kept across restarts") {
		t.Fatalf("after restart: %+v", r)
	}
}

// The store's crash test, through the socket: clients remember while the
// daemon is SIGKILLed at random moments; every remember that got a reply
// must be there after the restart.
func TestEveryAcknowledgedRememberSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns and kills the daemon ten times")
	}
	home := t.TempDir()
	const cycles, writers = 10, 4
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	var acked []string
	for cycle := range cycles {
		d := startDaemon(t, home)
		checkHeld(t, d.sock, acked, cycle)

		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := ipc.Dial(ctx, d.sock)
				if err != nil {
					return
				}
				defer c.Close()
				for i := 0; ctx.Err() == nil; i++ {
					res, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{
						"focus": fmt.Sprintf("cycle %d writer %d note %d", cycle, w, i),
					}})
					if err != nil {
						return // killed mid-call: no reply, no promise
					}
					mu.Lock()
					acked = append(acked, res.Key)
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		d.kill()
		wg.Wait()
		cancel()
		if _, err := os.Stat(d.sock); err != nil {
			t.Fatalf("cycle %d: SIGKILL should leave the socket file behind: %v", cycle, err)
		}
	}
	if len(acked) < cycles {
		t.Fatalf("only %d remembers were acknowledged over %d cycles: the test exercised nothing", len(acked), cycles)
	}
	d := startDaemon(t, home)
	checkHeld(t, d.sock, acked, cycles)
	t.Logf("%d acknowledged remembers survived %d SIGKILLs", len(acked), cycles)
}

func checkHeld(t *testing.T, sock string, keys []string, cycle int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialSock(t, sock)
	defer c.Close()
	for _, k := range keys {
		if _, err := c.Get(ctx, k); err != nil {
			t.Fatalf("after restart %d: acknowledged %s is gone: %v", cycle, k, err)
		}
	}
	st, err := c.Status(ctx)
	if err != nil || st.CMBs < len(keys) {
		t.Fatalf("after restart %d: %d records held, %d acknowledged (%v)", cycle, st.CMBs, len(keys), err)
	}
}
