package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/store"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openLimited(t *testing.T, name string, l Limits, now func() time.Time) *Node {
	t.Helper()
	home := t.TempDir()
	id, err := identity.Create(home, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(Options{Home: home, Group: "alpha", Identity: id, Limits: l, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.AttachMesh(&fakeMesh{})
	return n
}

// Entries of nodeIds that authored nothing stored expire once unseen for
// RosterIdleTTL; one that authored a stored record, a trusted one, a
// connected peer's and this node's own stay, and an expired peer's next
// handshake pins it afresh.
func TestRosterIdleEntriesExpire(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Now()}
	n := openLimited(t, "victim", Limits{RosterIdleTTL: time.Hour}, c.now)
	author := openTestNode(t, "author")
	idle, trusted, connected := newIdentity(t, "idle"), newIdentity(t, "trusted"), newIdentity(t, "connected")
	for _, id := range []*identity.Identity{idle, author.Identity(), trusted, connected} {
		if err := n.PinPeer(ctx, id.NodeID, id.PublicKey(), id.X25519.PublicKey().Bytes(), id.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Trust(ctx, trusted.NodeID, trusted.PublicKey(), nil); err != nil {
		t.Fatal(err)
	}
	n.AttachMesh(&fakeMesh{peers: []PeerInfo{{NodeID: connected.NodeID}}})
	res, err := author.Remember(ctx, RememberInput{Fields: fields("an authored record")})
	if err != nil {
		t.Fatal(err)
	}
	rec := heldRecord(t, author, res.Key)
	ch, err := n.Check(ctx, rec, source(author))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Accept(ctx, ch); err != nil {
		t.Fatal(err)
	}

	if x, err := n.PruneRoster(ctx); err != nil || x != 0 {
		t.Fatalf("prune within the TTL expired %d (%v), want none", x, err)
	}
	c.advance(time.Hour + time.Minute)
	if x, err := n.PruneRoster(ctx); err != nil || x != 1 {
		t.Fatalf("prune after the TTL expired %d (%v), want 1 (the idle peer)", x, err)
	}
	if _, err := n.Store().GetPeer(ctx, idle.NodeID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the idle peer's entry: %v, want expired", err)
	}
	for _, id := range []*identity.Identity{n.Identity(), author.Identity(), trusted, connected} {
		if _, err := n.Store().GetPeer(ctx, id.NodeID); err != nil {
			t.Errorf("entry of %s: %v, want kept", id.Name, err)
		}
	}
	if got := n.Counters.RosterExpired.Load(); got != 1 {
		t.Errorf("RosterExpired %d, want 1", got)
	}
	id := idle
	if err := n.PinPeer(ctx, id.NodeID, id.PublicKey(), id.X25519.PublicKey().Bytes(), id.Name); err != nil {
		t.Fatalf("the expired peer's next handshake: %v", err)
	}
}

// New entries beyond RosterMaxIdle prune the roster on their own, least
// recently seen first, without waiting for the periodic prune.
func TestRosterCapPrunesOnPin(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Now()}
	n := openLimited(t, "victim", Limits{RosterMaxIdle: 16}, c.now)
	var first string
	for i := range 100 {
		id := newIdentity(t, fmt.Sprintf("sybil-%d", i))
		if i == 0 {
			first = id.NodeID
		}
		if err := n.PinPeer(ctx, id.NodeID, id.PublicKey(), id.X25519.PublicKey().Bytes(), id.Name); err != nil {
			t.Fatal(err)
		}
		c.advance(time.Second)
		ps, err := n.Store().Peers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) > 1+16+16/8 {
			t.Fatalf("after %d pins the roster holds %d entries, want at most %d", i+1, len(ps), 1+16+16/8)
		}
	}
	if _, err := n.Store().GetPeer(ctx, first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the least recently seen entry: %v, want expired", err)
	}
}

// An author over its quota is refused with author-rate, a local verdict,
// while another author is not; the quota refills at AuthorRate, and
// neither duplicates nor imports are charged.
func TestAuthorQuota(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Now()}
	n := openLimited(t, "victim", Limits{AuthorRate: 1, AuthorBurst: 3}, c.now)
	flood, other := openTestNode(t, "flood"), openTestNode(t, "other")
	var recs []*cmb.Record
	for i := range 6 {
		res, err := flood.Remember(ctx, RememberInput{Fields: fields(fmt.Sprintf("flood %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, heldRecord(t, flood, res.Key))
	}
	gossiped := func(from *Node) Source {
		s := source(from)
		s.Via = SourceGossip
		return s
	}
	accept := func(rec *cmb.Record, from *Node) error {
		ch, err := n.Check(ctx, rec, gossiped(from))
		if err == nil {
			_, err = n.Accept(ctx, ch)
		}
		return err
	}
	for i, rec := range recs[:3] {
		if err := accept(rec, flood); err != nil {
			t.Fatalf("record %d within the burst: %v", i, err)
		}
	}
	// A duplicate is not charged: the fourth new record is still refused
	// for the quota, not because the duplicates spent it.
	if ch, err := n.Check(ctx, recs[0], gossiped(flood)); err != nil || !ch.Duplicate {
		t.Fatalf("duplicate: %v %v", ch, err)
	}
	err := accept(recs[3], flood)
	if !errors.Is(err, ErrAuthorRate) || !IsLocalVerdict(err) || cmb.ReasonOf(err) != ReasonAuthorRate {
		t.Fatalf("record over the quota: %v, want author-rate (a local verdict)", err)
	}
	if got := n.Counters.Rejected()[string(ReasonAuthorRate)]; got != 1 {
		t.Errorf("author-rate rejections %d, want 1", got)
	}
	res, err := other.Remember(ctx, RememberInput{Fields: fields("another author")})
	if err != nil {
		t.Fatal(err)
	}
	if err := accept(heldRecord(t, other, res.Key), other); err != nil {
		t.Errorf("another author's record: %v", err)
	}
	c.advance(time.Second)
	if err := accept(recs[3], flood); err != nil {
		t.Errorf("after a second's refill: %v", err)
	}
	if err := accept(recs[4], flood); !errors.Is(err, ErrAuthorRate) {
		t.Errorf("the refill is one record a second: %v", err)
	}
	// What this node pulls (catch-up, lineage fetch) is not charged: a
	// late joiner catches up on a prolific author at full speed.
	pulled := source(flood)
	pulled.Via = "catch-up"
	if ch, err := n.Check(ctx, recs[4], pulled); err != nil {
		t.Errorf("caught-up record over the quota: %v, want admitted", err)
	} else if _, err := n.Accept(ctx, ch); err != nil {
		t.Errorf("caught-up record over the quota: %v", err)
	}
	// Import restores this node's own memory: never charged.
	imp, err := n.Import(ctx, []ExportLine{{CMB: recs[5].Encode(), PublicKey: flood.Identity().PublicKeyB64()}})
	if err != nil || imp.Imported != 1 {
		t.Errorf("import over the quota: %+v %v, want imported", imp, err)
	}
}

// A record dated more than MaxFutureSkew ahead is refused as
// future-timestamp (a local verdict) before anything is written; one
// within it is admitted.
func TestFutureTimestampRefused(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Now()}
	n := openLimited(t, "victim", Limits{MaxFutureSkew: time.Hour}, c.now)
	author := openTestNode(t, "author")
	build := func(focus string, at time.Time) *cmb.Record {
		rec, err := cmb.Build(cmb.Draft{Fields: fields(focus), Group: "alpha", CreatedBy: author.Identity().NodeID, CreatedAt: at.UnixMilli()}, author.Identity().Ed25519)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	far := build("two hours ahead", c.now().Add(2*time.Hour))
	_, err := n.Check(ctx, far, source(author))
	if !errors.Is(err, ErrFutureTimestamp) || !IsLocalVerdict(err) {
		t.Fatalf("a record two hours ahead: %v, want future-timestamp (a local verdict)", err)
	}
	if got := n.Counters.Rejected()[string(ReasonFutureTimestamp)]; got != 1 {
		t.Errorf("future-timestamp rejections %d, want 1", got)
	}
	if _, err := n.Store().GetPeer(ctx, author.Identity().NodeID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused record pinned its author: %v", err)
	}
	if _, err := n.Check(ctx, build("59 minutes ahead", c.now().Add(59*time.Minute)), source(author)); err != nil {
		t.Errorf("a record within the skew: %v", err)
	}
	c.advance(2 * time.Hour)
	if _, err := n.Check(ctx, far, source(author)); err != nil {
		t.Errorf("the far record once its time has come: %v", err)
	}
}

func newIdentity(t *testing.T, name string) *identity.Identity {
	t.Helper()
	id, err := identity.Create(t.TempDir(), name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func openTestNode(t *testing.T, name string) *Node {
	t.Helper()
	n, _ := openNode(t, name, "alpha")
	return n
}

func heldRecord(t *testing.T, n *Node, key string) *cmb.Record {
	t.Helper()
	r, err := n.Store().Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cmb.Decode(r.Raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
