package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/identity"
)

// TestListForgetAndKeyPrefixes: list shows the newest memories without a
// query; get, lineage, remember --parent and forget take unique key
// prefixes; a forgotten memory is gone from list and recall and answers
// "forgotten on this node".
func TestListForgetAndKeyPrefixes(t *testing.T) {
	home := t.TempDir()
	startDaemon(t, home)
	id, err := identity.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	call := func(args ...string) result {
		t.Helper()
		return bin(t, "", append(args, "--home", home)...)
	}
	r := call("remember", "--focus", "first idea about caching")
	first := strings.TrimSpace(r.stdout)
	r = call("remember", "--focus", "second idea builds on it", "--parent", strings.ToUpper(first[5:13]))
	second := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(second) != 69 {
		t.Fatalf("remember --parent PREFIX: %+v", r)
	}
	r = call("remember", "--focus", "third idea, unrelated")
	third := strings.TrimSpace(r.stdout)

	r = call("list")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "AGE") || strings.Index(r.stdout, third) > strings.Index(r.stdout, first) || !strings.Contains(r.stdout, id.Name) {
		t.Fatalf("list (newest first, author named): %+v", r)
	}
	var l struct {
		Results []struct{ Key string } `json:"results"`
	}
	r = call("list", "--json", "--limit", "2", "--since", "1h", "--author", id.Name)
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Results) != 2 || l.Results[0].Key != third {
		t.Fatalf("list --json --limit 2 --author NAME: %+v", r)
	}
	if r = call("list", "--author", "nobody-here"); r.code != 0 || strings.TrimSpace(r.stdout) != "no memories" {
		t.Fatalf("list by an unknown author: %+v", r)
	}

	if r = call("get", first[5:15]); r.code != 0 || !strings.Contains(r.stdout, first) {
		t.Fatalf("get PREFIX: %+v", r)
	}
	if r = call("lineage", second[:12]); r.code != 0 || !strings.HasPrefix(r.stdout, second+"\n") || !strings.Contains(r.stdout, first) {
		t.Fatalf("lineage PREFIX: %+v", r)
	}
	if r = call("get", "zz"); r.code == 0 || !strings.Contains(r.stderr, "bad_request") {
		t.Fatalf("get with a non-prefix: %+v", r)
	}

	// Forget the root: kept hidden for the second's lineage; forget the
	// third: gone.
	if r = call("forget", first[5:15]); r.code != 0 || !strings.Contains(r.stdout, "forgot "+first) || !strings.Contains(r.stdout, "kept hidden") {
		t.Fatalf("forget PREFIX: %+v", r)
	}
	if r = call("forget", third); r.code != 0 || !strings.Contains(r.stdout, "local only") {
		t.Fatalf("forget KEY: %+v", r)
	}
	if r = call("forget", third); r.code != 0 || !strings.Contains(r.stdout, "already forgotten") {
		t.Fatalf("forget twice: %+v", r)
	}
	r = call("get", third)
	if r.code != 1 || !strings.Contains(r.stderr, "forgotten on this node") || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("get forgotten: %+v", r)
	}
	if r = call("list"); r.code != 0 || strings.Contains(r.stdout, third) || strings.Contains(r.stdout, first) || !strings.Contains(r.stdout, second) {
		t.Fatalf("list after forget: %+v", r)
	}
	if r = call("recall", "idea"); strings.Contains(r.stdout, third) || strings.Contains(r.stdout, first) {
		t.Fatalf("recall after forget: %+v", r)
	}
	r = call("remember", "--focus", "third idea, unrelated")
	if r.code != 0 || !strings.Contains(r.stderr, "forgotten on this node") {
		t.Fatalf("remembering forgotten text again: %+v", r)
	}
	if r = call("check"); r.code != 0 {
		t.Fatalf("check after forget: %+v", r)
	}
}

// TestPeersNamesAndAssertionsOnAMesh: peers prints whole dialable
// addresses (one pasted into --bootstrap connects a new node) and X25519
// keys; --to takes a peer's name; the same text from two authors is a
// duplicate for the second, kept as its assertion and shown by get. (A
// public group: how members meet is not what this tests.)
func TestPeersNamesAndAssertionsOnAMesh(t *testing.T) {
	dir := t.TempDir()
	h1, h2, h3 := filepath.Join(dir, "n1"), filepath.Join(dir, "n2"), filepath.Join(dir, "n3")
	d1 := startDaemon(t, h1, "--group", "alpha", "--public", "--no-mdns", "--name", "north", "--listen", "/ip4/127.0.0.1/tcp/0")
	boot := status(t, dialDaemon(t, d1)).Addrs[0]
	d2 := startDaemon(t, h2, "--group", "alpha", "--public", "--no-mdns", "--name", "south", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", boot)
	c1, c2 := dialDaemon(t, d1), dialDaemon(t, d2)
	waitFor(t, "two peers", 30*time.Second, func() bool { return status(t, c1).Peers == 1 && status(t, c2).Peers == 1 })
	id1, _ := identity.Load(h1)
	id2, _ := identity.Load(h2)

	r := bin(t, "", "peers", "--home", h2)
	if r.code != 0 || !strings.Contains(r.stdout, id1.NodeID+" (north)") || !strings.Contains(r.stdout, id1.E2EPublicKeyDER()) {
		t.Fatalf("peers: %+v", r)
	}
	var addr string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[len(f)-1], "/ip4/127.0.0.1/") {
			addr = f[len(f)-1]
		}
	}
	if !strings.HasSuffix(addr, "/p2p/"+status(t, c1).PeerID) {
		t.Fatalf("peers' address %q does not end in /p2p/<peerId>:\n%s", addr, r.stdout)
	}
	if r = bin(t, "", "status", "--home", h1); !strings.Contains(r.stdout, "x25519") || !strings.Contains(r.stdout, id1.E2EPublicKeyDER()) {
		t.Fatalf("status lacks the X25519 key: %+v", r)
	}
	// The address as printed is what --bootstrap takes.
	c3 := dialDaemon(t, startDaemon(t, h3, "--group", "alpha", "--public", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", addr))
	waitFor(t, "a node bootstrapped from peers' output joins", 30*time.Second, func() bool { return status(t, c3).Peers >= 1 })

	// --to by name.
	r = bin(t, "", "remember", "--home", h1, "--focus", "for south only", "--to", "south")
	if r.code != 0 {
		t.Fatalf("remember --to NAME: %+v", r)
	}
	directed := strings.TrimSpace(r.stdout)
	if r = bin(t, "", "get", "--home", h1, directed); !strings.Contains(r.stdout, "to           "+id2.NodeID) {
		t.Fatalf("directed record's recipient: %+v", r)
	}
	if r = bin(t, "", "remember", "--home", h1, "--focus", "x", "--to", "nobody"); r.code != 1 || !strings.Contains(r.stderr, `no peer named "nobody"`) {
		t.Fatalf("remember --to an unknown name: %+v", r)
	}

	// The same text from both: the second author's is kept as an assertion.
	r = bin(t, "", "remember", "--home", h1, "--focus", "the deploy is done")
	key := strings.TrimSpace(r.stdout)
	waitFor(t, "south holds north's record", 10*time.Second, func() bool { return has(t, c2, key) })
	r = bin(t, "", "remember", "--home", h2, "--json", "--focus", "the deploy is done")
	var rem map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rem) != nil || rem["key"] != key || rem["duplicate"] != true || rem["sameAuthor"] != false {
		t.Fatalf("second author's remember: %+v", r)
	}
	for _, h := range []string{h1, h2} {
		h := h
		waitFor(t, "both hold south's assertion", 10*time.Second, func() bool {
			r := bin(t, "", "get", "--home", h, key)
			return strings.Contains(r.stdout, "alsoBy") && strings.Contains(r.stdout, id2.NodeID)
		})
	}
	r = bin(t, "", "get", "--home", h1, "--json", key)
	var g struct {
		Assertions []struct {
			CreatedBy string          `json:"createdBy"`
			CMB       json.RawMessage `json:"cmb"`
		} `json:"assertions"`
	}
	if json.Unmarshal([]byte(r.stdout), &g) != nil || len(g.Assertions) != 1 || g.Assertions[0].CreatedBy != id2.NodeID {
		t.Fatalf("get --json assertions: %+v", r)
	}
	if v := bin(t, string(g.Assertions[0].CMB), "cmb", "verify", "--pubkey", id2.PublicKeyB64()); v.code != 0 {
		t.Fatalf("the assertion does not verify with south's key: %+v", v)
	}
}
