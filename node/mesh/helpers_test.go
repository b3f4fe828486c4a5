package mesh_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/mesh"
	"github.com/cmbnode/cmbnode/store"
)

// testGroup is the private group grp of this test: its id and epoch-1
// secret are derived from the test's name, so every member of one test
// shares them without any state outside the test, and two tests never do.
func testGroup(t testing.TB, grp string) groupkey.Group {
	sum := sha256.Sum256([]byte("cmbnode test group\x00" + t.Name() + "\x00" + grp))
	g := groupkey.Group{Name: grp}
	copy(g.ID[:], sum[:])
	e := groupkey.Epoch{N: 1, Secret: sha256.Sum256(sum[:]), Created: time.UnixMilli(1)}
	g.Epochs = []groupkey.Epoch{e}
	return g
}

// testKeys is a fresh keyring for the test's group grp (grace one hour).
func testKeys(t testing.TB, grp string) *groupkey.Keyring {
	t.Helper()
	k, err := groupkey.New(testGroup(t, grp), groupkey.Options{Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// topicOf is the GossipSub topic of the test's private group grp.
func topicOf(t testing.TB, grp string) string { return group.Topic(groupkey.Tag(testGroup(t, grp).ID)) }

// public makes a member's group name-only (--public).
func public(c *mesh.Config) { c.Keys, c.Public = nil, true }

// with chains tunings.
func with(fs ...func(*mesh.Config)) func(*mesh.Config) {
	return func(c *mesh.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

// member is one in-process node with its mesh.
type member struct {
	t    testing.TB
	home string
	grp  string
	id   string
	n    *node.Node
	m    *mesh.Mesh
	keys *groupkey.Keyring // the group's secrets (testKeys unless set before start)
	tune func(*mesh.Config)
	// prep runs on the opened node before its mesh starts.
	prep func(*node.Node)
	// limits are the node's admission limits (zero: the defaults).
	limits node.Limits
	// allowUnsigned is strict_signatures = false.
	allowUnsigned bool
	// storeOpts tune the node's badger store (zero: the daemon's defaults).
	storeOpts store.Options
}

func logger(t testing.TB) *slog.Logger {
	if os.Getenv("MESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("t", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// newMember starts a node in a fresh home, bootstrapped to peers.
func newMember(t testing.TB, grp, name string, peers []*member, tune func(*mesh.Config)) *member {
	t.Helper()
	return newMemberStore(t, grp, name, peers, tune, store.Options{})
}

// newMemberStore is newMember with the node's store options set.
func newMemberStore(t testing.TB, grp, name string, peers []*member, tune func(*mesh.Config), so store.Options) *member {
	t.Helper()
	home := t.TempDir()
	if _, err := identity.Create(home, name, nil); err != nil {
		t.Fatal(err)
	}
	mb := &member{t: t, home: home, grp: grp, tune: tune, storeOpts: so}
	mb.start(peers)
	t.Cleanup(mb.stop)
	return mb
}

// newMemberIn prepares a member in home (which must hold an identity, or
// gets one) with keys; the caller starts it.
func newMemberIn(t testing.TB, home, grp, name string, keys *groupkey.Keyring, tune func(*mesh.Config)) *member {
	t.Helper()
	if _, err := identity.Load(home); err != nil {
		if _, err := identity.Create(home, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	mb := &member{t: t, home: home, grp: grp, keys: keys, tune: tune}
	t.Cleanup(mb.stop)
	return mb
}

// start opens the node in mb.home and starts its mesh.
func (mb *member) start(peers []*member) {
	t := mb.t
	t.Helper()
	id, err := identity.Load(mb.home)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: mb.home, Group: mb.grp, Identity: id, Logger: logger(t), Limits: mb.limits, AllowUnsigned: mb.allowUnsigned, StoreOptions: mb.storeOpts})
	if err != nil {
		t.Fatal(err)
	}
	if mb.prep != nil {
		mb.prep(n)
	}
	if mb.keys == nil {
		mb.keys = testKeys(t, mb.grp)
	}
	cfg := mesh.Config{
		Node: n, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: logger(t), Keys: mb.keys,
		CatchUpInterval: 3 * time.Second, RetryMax: 2 * time.Second, PendingRetryMax: 2 * time.Second, KeyReload: 200 * time.Millisecond,
	}
	for _, p := range peers {
		if p.m != nil {
			cfg.Bootstrap = append(cfg.Bootstrap, p.m.Addrs()...)
		}
	}
	if mb.tune != nil {
		mb.tune(&cfg)
	}
	m, err := mesh.Start(context.Background(), cfg)
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	n.AttachMesh(m)
	mb.n, mb.m, mb.id = n, m, id.NodeID
}

// stop detaches and closes the mesh, then the node; safe to call twice.
func (mb *member) stop() {
	if mb.m == nil {
		return
	}
	mb.n.AttachMesh(nil)
	if err := mb.m.Close(); err != nil {
		mb.t.Logf("closing mesh: %v", err)
	}
	if err := mb.n.Close(); err != nil {
		mb.t.Logf("closing node: %v", err)
	}
	mb.m, mb.n = nil, nil
}

func (mb *member) nodeID() string { return mb.id }

// remember authors a record on mb.
func (mb *member) remember(focus string, parents []string, to string) string {
	mb.t.Helper()
	var f cmb.Fields
	f[cmb.Focus].Text = focus
	res, err := mb.n.Remember(context.Background(), node.RememberInput{Fields: f, Parents: parents, To: to})
	if err != nil {
		mb.t.Fatalf("remember %q: %v", focus, err)
	}
	return res.Key
}

func (mb *member) has(key string) bool {
	ok, err := mb.n.Store().Has(context.Background(), key)
	if err != nil {
		mb.t.Fatal(err)
	}
	return ok
}

// eventually polls cond until it holds or the deadline passes. Deadlines are
// generous: they bound a hang, they do not measure speed.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPeers waits until every member sees want peers.
func waitPeers(t testing.TB, want int, ms ...*member) {
	t.Helper()
	for _, mb := range ms {
		eventually(t, 20*time.Second, fmt.Sprintf("%s sees %d peers", mb.n.Identity().Name, want), func() bool {
			return mb.m.PeerCount() >= want
		})
	}
}
