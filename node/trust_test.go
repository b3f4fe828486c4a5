package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/store"
)

// agentRecord builds a record by an agent-name author (allowed by the
// schema, never pinned by nodeId), signed with priv unless priv is nil.
func agentRecord(t *testing.T, author, focus string, priv ed25519.PrivateKey) *cmb.Record {
	t.Helper()
	r := &cmb.Record{CreatedBy: author, CreatedAt: 1_751_000_000_000}
	r.Fields = fields(focus)
	for i := range r.Fields {
		if r.Fields[i].Text == "" {
			r.Fields[i].Text = cmb.Neutral
		}
	}
	r.SetGroup("alpha")
	if priv == nil {
		texts := r.Fields.Texts()
		r.Key = cmb.AddressLegacy(&texts)
		return r
	}
	texts := r.Fields.Texts()
	r.Key = cmb.AddressV1(&texts, nil, author)
	if err := r.Sign(priv); err != nil {
		t.Fatal(err)
	}
	return r
}

// Strict_signatures is on by default, and with
// it off the downgrade rule holds durably: once an author has signed, its
// unsigned records are refused, also after a restart.
func TestUnsignedDowngradeRefused(t *testing.T) {
	ctx := context.Background()
	strict, _ := openNode(t, "strict", "alpha")
	if _, err := strict.Check(ctx, agentRecord(t, "legacy-agent", "old style", nil), Source{Via: "test"}); !errors.Is(err, cmb.ErrUnsigned) {
		t.Fatalf("strict node, unsigned record: %v, want unsigned", err)
	}

	home := t.TempDir()
	id, err := identity.Create(home, "lenient", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Node {
		n, err := Open(Options{Home: home, Group: "alpha", Identity: id, AllowUnsigned: true})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := open()
	accept := func(r *cmb.Record, src Source) error {
		c, err := n.Check(ctx, r, src)
		if err != nil {
			return err
		}
		_, err = n.Accept(ctx, c)
		return err
	}
	if err := accept(agentRecord(t, "legacy-agent", "first, unsigned", nil), Source{Via: "test"}); err != nil {
		t.Fatalf("permissive node, unsigned record from an author never seen signing: %v", err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	if err := accept(agentRecord(t, "legacy-agent", "now signed", priv), Source{Via: "test", AuthorKey: cmb.EncodeKey(pub)}); err != nil {
		t.Fatalf("signed record: %v", err)
	}
	later := agentRecord(t, "legacy-agent", "unsigned again", nil)
	if err := accept(later, Source{Via: "test"}); !errors.Is(err, cmb.ErrDowngrade) {
		t.Fatalf("unsigned after signed: %v, want a refused downgrade", err)
	}
	n.Close()
	n = open()
	defer n.Close()
	if err := accept(later, Source{Via: "test"}); !errors.Is(err, cmb.ErrDowngrade) {
		t.Fatalf("unsigned after signed, after a restart: %v, want a refused downgrade", err)
	}
	if n.Counters.Snapshot().Rejected["unsigned"] == 0 {
		t.Fatal("downgrade not counted under its reason")
	}
}

// Received records are held to the lineage
// rules against what the node stores (lineage.Validate), not only to the
// shape checks.
func TestReceivedLineageValidated(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	p, _ := alice.Remember(ctx, RememberInput{Fields: fields("root")})
	c, _ := alice.Remember(ctx, RememberInput{Fields: fields("child"), Parents: []string{p.Key}})
	for _, r := range am.published {
		chk, err := bob.Check(ctx, r, source(alice))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Accept(ctx, chk); err != nil {
			t.Fatal(err)
		}
	}
	// Signed by alice, well formed, but its ancestors leave out the
	// parent's own ancestor: a truncated lineage.
	bad, err := cmb.Build(cmb.Draft{Fields: fields("grandchild"), Parents: []string{c.Key}, Ancestors: []string{c.Key},
		Group: "alpha", CreatedBy: alice.Identity().NodeID, CreatedAt: 1_751_000_000_000}, alice.Identity().Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Check(ctx, bad, source(alice)); !errors.Is(err, cmb.ErrBadLineage) {
		t.Fatalf("truncated lineage: %v, want bad-lineage", err)
	}
	if bob.Counters.Snapshot().Rejected["bad-lineage"] != 1 {
		t.Fatalf("rejections %v, want one bad-lineage", bob.Counters.Snapshot().Rejected)
	}
	// The same record with its lineage whole is accepted.
	good, _ := cmb.Build(cmb.Draft{Fields: fields("grandchild"), Parents: []string{c.Key}, Ancestors: []string{p.Key, c.Key},
		Group: "alpha", CreatedBy: alice.Identity().NodeID, CreatedAt: 1_751_000_000_000}, alice.Identity().Ed25519)
	if _, err := bob.Check(ctx, good, source(alice)); err != nil {
		t.Fatalf("whole lineage: %v", err)
	}
}

// Checking a received record writes nothing
// when its author is already pinned, so receiving costs one durable commit
// per record, the record's own.
func TestReceiveCommitsOnlyTheRecord(t *testing.T) {
	ctx := context.Background()
	alice, am := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	const n = 50
	for i := range n {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields("note " + string(rune('a'+i%26)) + string(rune('a'+i/26)))}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := bob.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range am.published {
		c, err := bob.Check(ctx, r, source(alice))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Accept(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	after, err := bob.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One commit per record, plus at most one the first time alice signs.
	if got := after.Commits - before.Commits; got > n+1 {
		t.Fatalf("%d received records made %d durable commits, want at most %d", n, got, n+1)
	}
}

// The node's own key is pinned, confirmed,
// before it can receive anything.
func TestOwnIdentityPinnedAtOpen(t *testing.T) {
	n, _ := openNode(t, "self", "alpha")
	p, err := n.Store().GetPeer(context.Background(), n.Identity().NodeID)
	if err != nil || !p.Confirmed || !ed25519.PublicKey(p.Ed25519).Equal(n.Identity().PublicKey()) {
		t.Fatalf("own roster entry %+v %v, want our key, confirmed", p, err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	forged, err := cmb.Build(cmb.Draft{Fields: fields("i never said this"), Group: "alpha", CreatedBy: n.Identity().NodeID, CreatedAt: 1}, priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Check(context.Background(), forged, Source{Via: "test", AuthorKey: cmb.EncodeKey(priv.Public().(ed25519.PublicKey))}); !errors.Is(err, ErrRejected) {
		t.Fatalf("a record in our name with another key: %v, want rejected", err)
	}
}

// A handshake presenting another key for a confirmed pin is recorded as a
// conflict, not refused: the author's records are quarantined and neither
// key is believed until Trust picks one; a key the operator trusted is
// then not disputed again (a key conflict adapters match without knowing
// the roster).
func TestPinPeerConflictIsRecorded(t *testing.T) {
	ctx := context.Background()
	alice, _ := openNode(t, "alice", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, alice, bob)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := alice.PinPeer(ctx, bob.Identity().NodeID, other, nil, "not bob"); err != nil {
		t.Fatalf("a second handshake key: %v, want a recorded conflict", err)
	}
	cs, err := alice.Conflicts(ctx)
	if err != nil || len(cs) != 1 || cs[0].NodeID != bob.Identity().NodeID || len(cs[0].Keys) != 2 {
		t.Fatalf("conflicts: %+v %v", cs, err)
	}
	bobKey := bob.Identity().Ed25519.Public().(ed25519.PublicKey)
	if res, err := alice.Trust(ctx, bob.Identity().NodeID, bobKey, nil); err != nil || !res.Resolved {
		t.Fatalf("trust: %+v %v", res, err)
	}
	err = alice.PinPeer(ctx, bob.Identity().NodeID, other, nil, "not bob")
	if !errors.Is(err, ErrRejected) || !errors.Is(err, ErrKeyConflict) || !errors.Is(err, store.ErrKeyConflict) {
		t.Fatalf("a handshake key against a trusted pin: %v, want rejected, key conflict", err)
	}
	if !IsLocalVerdict(err) || rejectReason(err) != "key-conflict" {
		t.Fatalf("conflicting handshake key: local verdict %v, reason %q", IsLocalVerdict(err), rejectReason(err))
	}
}

// A directed record a local agent signs and publishes travels sealed for
// its recipient, as one the node authors does, and its recipient may fetch
// it from this node.
func TestPublishedDirectedRecordTravelsSealed(t *testing.T) {
	ctx := context.Background()
	host, m := openNode(t, "host", "alpha")
	bob, _ := openNode(t, "bob", "alpha")
	introduce(t, host, bob)
	agent, err := identity.Create(t.TempDir(), "agent", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bobID := bob.Identity().NodeID
	rec, err := cmb.Build(cmb.Draft{Fields: fields("for bob's eyes only"), Group: "alpha", To: bobID, CreatedBy: agent.NodeID, CreatedAt: 1}, agent.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Publish(ctx, rec, agent.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if len(m.published) != 1 {
		t.Fatalf("published %d records", len(m.published))
	}
	out := m.published[0]
	if !out.IsSealed() || strings.Contains(string(out.Encode()), "bob's eyes") {
		t.Fatalf("an agent's directed record was published in clear: %s", out.Encode())
	}
	sr, ok, err := host.Serve(ctx, rec.Key, bobID)
	if err != nil || !ok {
		t.Fatalf("the recipient cannot fetch it: %v %v", ok, err)
	}
	if strings.Contains(string(sr.Raw), "bob's eyes") {
		t.Fatal("served in clear")
	}
}

// A handshake key that replaces a key known only from gossip is an event
// the operator hears of: counted, and logged at WARN with the nodeId and
// both keys.
func TestReplacedKeyCountedAndLoggedAtWarn(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	id, err := identity.Create(home, "victim", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	n, err := Open(Options{Home: home, Group: "alpha", Identity: id, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	real, err := identity.Create(t.TempDir(), "real", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rogue, roguePriv, _ := ed25519.GenerateKey(rand.Reader)
	forged, err := cmb.Build(cmb.Draft{Fields: fields("in real's name"), Group: "alpha", CreatedBy: real.NodeID, CreatedAt: 1_751_000_000_000}, roguePriv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Check(ctx, forged, Source{Via: "gossip", AuthorKey: cmb.EncodeKey(rogue)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Accept(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := n.PinPeer(ctx, real.NodeID, real.PublicKey(), real.X25519.PublicKey().Bytes(), "real"); err != nil {
		t.Fatal(err)
	}
	if s := n.Counters.Snapshot(); s.KeysReplaced != 1 || s.Quarantined != 1 {
		t.Fatalf("counters keysReplaced %d quarantined %d, want 1 and 1", s.KeysReplaced, s.Quarantined)
	}
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "replaced an author key") {
			line = l
		}
	}
	for _, want := range []string{"level=WARN", "nodeId=" + real.NodeID, "replacedKey=" + cmb.EncodeKey(rogue), "key=" + real.PublicKeyB64(), "quarantined=1"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the replacement's log line %q lacks %q; all logs:\n%s", line, want, logs.String())
		}
	}
}

// A home whose roster already pins this node's nodeId to another key — as
// gossip could leave it before the node pinned its own — gets its own key
// back at Open, whether that pin was unconfirmed or trusted: the records
// the other key signed in our name are quarantined, and a genuine record
// of ours coming from a peer (one restored from a backup elsewhere, say)
// verifies again.
func TestOwnPinRestoredAtOpen(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(map[bool]string{false: "unconfirmed", true: "trusted"}[trusted], func(t *testing.T) {
			ctx := context.Background()
			home := t.TempDir()
			id, err := identity.Create(home, "self", rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			n, err := Open(Options{Home: home, Group: "alpha", Identity: id})
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}

			// The damage, written into the store directly: our nodeId
			// pinned to a rogue key and a record forged in our name under it.
			rogue, roguePriv, _ := ed25519.GenerateKey(rand.Reader)
			forged, err := cmb.Build(cmb.Draft{Fields: fields("i never said this"), Group: "alpha", CreatedBy: id.NodeID, CreatedAt: 1_751_000_000_000}, roguePriv)
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(StoreDir(home), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			self := strings.ToLower(id.NodeID)
			if err := st.DeletePeer(ctx, self); err != nil {
				t.Fatal(err)
			}
			if trusted {
				_, _, err = st.TrustPeer(ctx, store.Peer{NodeID: self, Ed25519: rogue})
			} else {
				_, err = st.PutPeer(ctx, store.Peer{NodeID: self, Ed25519: rogue})
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := st.Put(ctx, entryOf(forged), store.Meta{Source: "peer-rogue", Verified: true}); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}

			n, err = Open(Options{Home: home, Group: "alpha", Identity: id})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			p, err := n.Store().GetPeer(ctx, self)
			if err != nil || !p.Confirmed || !ed25519.PublicKey(p.Ed25519).Equal(id.PublicKey()) {
				t.Fatalf("own roster entry after Open %+v %v, want our key, confirmed", p, err)
			}
			if !n.Store().IsQuarantined(forged.Key) {
				t.Fatal("the record forged in our name is still surfaced")
			}
			genuine, err := cmb.Build(cmb.Draft{Fields: fields("genuinely mine"), Group: "alpha", CreatedBy: id.NodeID, CreatedAt: 1_751_000_000_000}, id.Ed25519)
			if err != nil {
				t.Fatal(err)
			}
			c, err := n.Check(ctx, genuine, Source{PeerID: "peer-bob", NodeID: "bob", AuthorKey: id.PublicKeyB64(), Via: "catch-up"})
			if err != nil {
				t.Fatalf("our genuine record coming back from a peer: %v", err)
			}
			if _, err := n.Accept(ctx, c); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Get(ctx, genuine.Key); err != nil {
				t.Fatalf("our genuine record after it came back: %v", err)
			}
		})
	}
}
