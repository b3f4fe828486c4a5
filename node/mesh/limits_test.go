package mesh_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/mesh"
	"github.com/cmbnode/cmbnode/store"
)

// newLimitedMember is newMember with the node's admission limits set.
func newLimitedMember(t *testing.T, grp, name string, peers []*member, tune func(*mesh.Config), l node.Limits) *member {
	t.Helper()
	mb := newMemberIn(t, t.TempDir(), grp, name, nil, tune)
	mb.limits = l
	mb.start(peers)
	return mb
}

// joinedRogue is a rogue member admitted to the victim's group "alpha" and
// on its topic, its stream read by serve (nil: rogue.serve, answering pings).
func joinedRogue(t *testing.T, victim *member, peers int, serve func(*rogue)) *rogue {
	t.Helper()
	r := newRogue(t)
	r.dial(victim)
	r.join("alpha")
	if serve == nil {
		serve = (*rogue).serve
	}
	serve(r)
	r.joinTopic("alpha")
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == peers })
	eventually(t, 10*time.Second, "the rogue sees the victim on the topic", func() bool {
		return len(r.ps.ListPeers(topicOf(t, "alpha"))) > 0
	})
	return r
}

// buildAt is rogue.build with a chosen createdAt and lineage.
func (r *rogue) buildAt(focus string, at time.Time, parents []string) *cmb.Record {
	r.t.Helper()
	var f cmb.Fields
	f[cmb.Focus].Text = focus
	rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: r.id.NodeID, CreatedAt: at.UnixMilli(),
		Parents: parents, Ancestors: parents}, r.id.Ed25519)
	if err != nil {
		r.t.Fatal(err)
	}
	return rec
}

func (mb *member) authored(author string) int {
	mb.t.Helper()
	n := 0
	err := mb.n.Store().Scan(context.Background(), store.Window{Author: author}, func(store.KeyTime) error {
		n++
		return nil
	})
	if err != nil {
		mb.t.Fatal(err)
	}
	return n
}

// A member publishes records dated two hours and a year ahead, signed and
// otherwise valid: the victim refuses them as future-timestamp and stores
// neither, while a record of the same member dated a minute ahead (within
// the skew) and honest traffic are stored.
func TestFutureRecordsRefused(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := joinedRogue(t, victim, 2, nil)
	halt := honestTraffic(t, honest)

	key := r.id.PublicKeyB64()
	var future []string
	for _, ahead := range []time.Duration{2 * time.Hour, 365 * 24 * time.Hour} {
		rec := r.buildAt(fmt.Sprintf("dated %s ahead", ahead), time.Now().Add(ahead), nil)
		future = append(future, rec.Key)
		r.publish(frameOf(t, rec, key))
	}
	near := r.buildAt("dated a minute ahead", time.Now().Add(time.Minute), nil)
	r.publish(frameOf(t, near, key))

	defer func() { t.Logf("victim rejections %v", victim.n.Counters.Rejected()) }()
	eventually(t, 10*time.Second, "the near-future record is stored", func() bool { return victim.has(near.Key) })
	eventually(t, 10*time.Second, "both far-future records refused as future-timestamp", func() bool {
		return victim.n.Counters.Rejected()[string(node.ReasonFutureTimestamp)] >= 2
	})
	time.Sleep(time.Second) // honest traffic after the refusals
	for _, k := range future {
		if victim.has(k) {
			t.Errorf("victim stored far-future record %s", k)
		}
	}
	victim.storesAll(t, halt())
}

// A member floods the group with 1,500 valid records of its own. The
// victim, whose quota is 20 records/s per author in bursts of 100, stores
// no more of them than the token bucket allows since the flood began,
// refuses the rest as author-rate, and keeps storing an honest member's
// records (20/s, within its own quota) throughout.
func TestAuthorFloodBounded(t *testing.T) {
	const rate, burst, flood = 20, 100, 1500
	victim := newLimitedMember(t, "alpha", "victim", nil, nil, node.Limits{AuthorRate: rate, AuthorBurst: burst})
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := joinedRogue(t, victim, 2, nil)
	halt := honestTraffic(t, honest)

	start := time.Now()
	key := r.id.PublicKeyB64()
	for i := range flood {
		r.publish(frameOf(t, r.build(fmt.Sprintf("flood %d", i), "alpha", r.id.NodeID), key))
		if i%200 == 199 {
			time.Sleep(50 * time.Millisecond) // within the rogue's outbound queue
		}
	}
	refused := func() int64 { return victim.n.Counters.Rejected()[string(node.ReasonAuthorRate)] }
	defer func() {
		t.Logf("victim stored %d of the flood, refused %d; rejections %v", victim.authored(r.id.NodeID), refused(), victim.n.Counters.Rejected())
	}()
	eventually(t, 20*time.Second, "the flood is refused as author-rate", func() bool { return refused() >= flood/2 })
	// The bound holds whenever it is read: stored ≤ burst + rate·elapsed.
	for range 5 {
		stored := victim.authored(r.id.NodeID)
		if bound := burst + int(rate*time.Since(start).Seconds()) + 1; stored > bound {
			t.Fatalf("victim stored %d of the flooder's records within %s, want at most %d", stored, time.Since(start), bound)
		}
		time.Sleep(200 * time.Millisecond)
	}
	victim.storesAll(t, halt())
}

// A member publishes 300 orphans, each naming a parent nobody holds. The
// victim, allowing 50 missing parents per author, queues 50 and drops the
// rest (author-cap); each queued parent is asked for with growing gaps and
// given up after PendingTTL (expired), after which nothing is asked any
// more: an idle node is idle. Honest traffic is stored meanwhile.
func TestOrphansBoundedAndExpired(t *testing.T) {
	const perAuthor, orphans = 50, 300
	const ttl = 6 * time.Second
	tune := func(c *mesh.Config) {
		c.PendingPerAuthor, c.PendingTTL, c.PendingRetryMax = perAuthor, ttl, time.Minute
		mesh.DisableCatchUp(c) // only the parent fetch asks the rogue for keys
	}
	victim := newMember(t, "alpha", "victim", nil, tune)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)

	var asked *fetchCounts
	r := joinedRogue(t, victim, 2, func(r *rogue) { asked = r.serveMissing() })
	halt := honestTraffic(t, honest)

	key := r.id.PublicKeyB64()
	for i := range orphans {
		r.publish(frameOf(t, r.buildAt(fmt.Sprintf("orphan %d", i), time.Now(), []string{randomCMBKey(t)}), key))
	}
	dropped := func(reason string) int64 { return victim.m.Stats().PendingDropped[reason] }
	defer func() { t.Logf("victim stats %+v", victim.m.Stats()) }()
	eventually(t, 15*time.Second, "every orphan stored", func() bool { return victim.authored(r.id.NodeID) == orphans })
	// A record is counted stored before its missing parents are queued
	// (the validator stores it, then hands them to the fetcher), so the
	// drops are waited for; the queue never holds more than the cap.
	most := 0
	eventually(t, 5*time.Second, "the missing parents past the author cap dropped", func() bool {
		most = max(most, victim.m.Stats().PendingParents)
		return dropped("author-cap") >= orphans-perAuthor
	})
	if most > perAuthor {
		t.Errorf("%d missing parents pending for one author, want at most %d", most, perAuthor)
	}
	if d := dropped("author-cap"); d != orphans-perAuthor {
		t.Errorf("%d missing parents dropped at the author cap, want %d", d, orphans-perAuthor)
	}
	eventually(t, ttl+10*time.Second, "every pending parent expired", func() bool {
		return victim.m.Stats().PendingParents == 0 && dropped("expired") == perAuthor
	})
	// Retried with backoff (300 ms, 1 s, 2 s, 4 s, …) within the TTL: a
	// handful of attempts per key, where a fixed 2 s retry would ask
	// every key on and on.
	perKey := asked.max()
	if perKey < 2 || perKey > 5 {
		t.Errorf("a parent was asked for %d times within %s, want 2..5", perKey, ttl)
	}
	before := asked.total()
	time.Sleep(3 * time.Second)
	if after := asked.total(); after != before {
		t.Errorf("the victim asked for %d more parents after giving them all up", after-before)
	}
	if n := victim.m.Stats().ParentFetches; n != int64(before) {
		t.Logf("parent fetches counted %d, the rogue was asked %d", n, before)
	}
	victim.storesAll(t, halt())
}

// fetchCounts counts, per key, how often a peer asked for it.
type fetchCounts struct {
	mu sync.Mutex
	by map[string]int
}

func (c *fetchCounts) max() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := 0
	for _, n := range c.by {
		m = max(m, n)
	}
	return m
}

func (c *fetchCounts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, n := range c.by {
		t += n
	}
	return t
}

// serveMissing answers pings and every x-cmbnode-fetch-many with "all
// missing", counting the keys asked for.
func (r *rogue) serveMissing() *fetchCounts {
	c := &fetchCounts{by: map[string]int{}}
	go func() {
		for {
			p, err := cmb.ReadFrame(r.s, nil)
			if err != nil {
				return
			}
			var req struct {
				Type  string   `json:"type"`
				ReqID string   `json:"reqId"`
				Keys  []string `json:"keys"`
			}
			if json.Unmarshal(p, &req) != nil {
				continue
			}
			switch req.Type {
			case cmb.TypePing:
				pp, _ := cmb.MarshalFrame(&cmb.Pong{})
				_ = cmb.WriteFrame(r.s, pp)
			case "x-cmbnode-fetch-many":
				c.mu.Lock()
				for _, k := range req.Keys {
					c.by[k]++
				}
				c.mu.Unlock()
				out, _ := json.Marshal(map[string]any{"type": "x-cmbnode-records", "reqId": req.ReqID, "records": []any{}, "missing": req.Keys})
				_ = cmb.WriteFrame(r.s, out)
			}
		}
	}()
	return c
}

func randomCMBKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "cmb1-" + hex.EncodeToString(b)
}

// 120 throwaway identities each handshake into the group (proving
// membership, as a member minting identities would) and leave without
// authoring anything. The victim, keeping at most 20 roster entries of
// nodeIds that authored nothing stored, never holds many more than that
// while the handshakes come, expires the rest, and keeps the honest
// member, whose records keep arriving.
func TestSybilHandshakesRosterBounded(t *testing.T) {
	const maxIdle, sybils = 20, 120
	victim := newLimitedMember(t, "alpha", "victim", nil, nil, node.Limits{RosterMaxIdle: maxIdle})
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	halt := honestTraffic(t, honest)
	ctx := context.Background()
	roster := func() []store.Peer {
		ps, err := victim.n.Store().Peers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}

	base := victim.m.Stats().Handshakes
	most := 0
	for i := range sybils {
		r := newRogue(t)
		r.dial(victim)
		r.join("alpha")
		if err := r.h.Close(); err != nil {
			t.Fatal(err)
		}
		most = max(most, len(roster()))
		if i%40 == 39 {
			t.Logf("%d sybils handshaken; roster %d entries", i+1, len(roster()))
		}
	}
	// Self, honest, the cap, and the entries pinned since the last prune
	// (one every cap/8) or still connected when it ran.
	if limit := 2 + maxIdle + maxIdle/8 + 4; most > limit {
		t.Errorf("the roster held %d entries during the attack, want at most %d", most, limit)
	}
	// The daemon's periodic prune, once every sybil is pinned and gone.
	eventually(t, 10*time.Second, "every sybil handshaken", func() bool { return victim.m.Stats().Handshakes >= base+sybils })
	eventually(t, 10*time.Second, "the sybils are disconnected", func() bool { return victim.m.PeerCount() == 1 })
	if _, err := victim.n.PruneRoster(ctx); err != nil {
		t.Fatal(err)
	}
	ps := roster()
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.NodeID)
	}
	if len(ps) > 2+maxIdle {
		for _, p := range ps {
			t.Logf("kept %s %q confirmed %v trusted %v authored %d", p.NodeID, p.Name, p.Confirmed, p.Trusted, victim.authored(p.NodeID))
		}
		t.Errorf("roster has %d entries after the prune, want at most %d", len(ps), 2+maxIdle)
	}
	if !strings.Contains(strings.Join(ids, " "), strings.ToLower(honest.nodeID())) {
		t.Error("the honest member's roster entry was expired")
	}
	if n := victim.n.Counters.RosterExpired.Load(); n < sybils-maxIdle {
		t.Errorf("%d roster entries expired, want at least %d", n, sybils-maxIdle)
	}
	victim.storesAll(t, halt())
}
