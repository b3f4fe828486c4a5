package mesh_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// memberState is what a member's mesh and node said at one moment.
type memberState struct {
	peers, gossipMesh           int
	caughtUp, fetched, received int64
}

func snapshotMembers(ms []*member) []memberState {
	out := make([]memberState, len(ms))
	for i, mb := range ms {
		if mb.m == nil {
			continue
		}
		st := mb.m.Stats()
		out[i] = memberState{peers: st.Peers, gossipMesh: st.GossipMesh,
			caughtUp: mb.n.Counters.CaughtUp.Load(), fetched: mb.n.Counters.Fetched.Load(), received: mb.n.Counters.Received.Load()}
	}
	return out
}

// lateArrival is a delivery of one of the measured CMBs to a member.
type lateArrival struct {
	member, author int
	key            string
	after          time.Duration
	via            arrival
}

// slowLink says whether member i (by its first address) is on a slow link.
func (g *simGroup) slowLink(i int) bool {
	return g.slowEvery > 0 && i%g.slowEvery == g.slowEvery-1
}

// logTail logs what the delivery tail is made of: every arrival later
// than a second, by member (its link, peers and GossipSub mesh before and
// after the CMBs were written, what it caught up or fetched meanwhile), by
// CMB (its author's link) and by path; and the latencies of the members on
// slow links beside the others'.
func logTail(t *testing.T, g *simGroup, all []lateArrival, before, after []memberState, cmbs int) {
	pct := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "none"
		}
		slices.Sort(ds)
		return fmt.Sprintf("p50 %v p99 %v max %v (%d)", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*99/100].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds))
	}
	var slow, fast []time.Duration
	var late []lateArrival
	for _, a := range all {
		if g.slowLink(a.member) {
			slow = append(slow, a.after)
		} else {
			fast = append(fast, a.after)
		}
		if a.after > time.Second {
			late = append(late, a)
		}
	}
	t.Logf("TAIL members on slow links: %s; others: %s", pct(slow), pct(fast))
	members, keys, via := map[int][]lateArrival{}, map[string][]lateArrival{}, map[string]int{}
	for _, a := range late {
		members[a.member] = append(members[a.member], a)
		keys[a.key] = append(keys[a.key], a)
		via[a.via.via]++
	}
	t.Logf("TAIL %d of %d arrivals after more than 1 s: %d members, %d of %d CMBs; by path %v", len(late), len(all), len(members), len(keys), cmbs, via)
	order := slices.Sorted(maps.Keys(members))
	slices.SortStableFunc(order, func(a, b int) int { return len(members[b]) - len(members[a]) })
	for _, i := range order[:min(40, len(order))] {
		arr := members[i]
		worst := slices.MaxFunc(arr, func(a, b lateArrival) int { return int(a.after - b.after) })
		b, e := before[i], after[i]
		t.Logf("TAIL member %d (slow link %v): %d late, worst %v via %s; peers %d→%d, GossipSub mesh %d→%d, caught up %d, fetched %d, received %d while the CMBs were written",
			i, g.slowLink(i), len(arr), worst.after.Round(time.Millisecond), worst.via.via, b.peers, e.peers, b.gossipMesh, e.gossipMesh,
			e.caughtUp-b.caughtUp, e.fetched-b.fetched, e.received-b.received)
	}
	n := 0
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		arr := keys[k]
		a := arr[0].author
		worst := slices.MaxFunc(arr, func(a, b lateArrival) int { return int(a.after - b.after) })
		t.Logf("TAIL CMB %s by member %d (slow link %v): late at %d members, worst %v", k[:min(12, len(k))], a, g.slowLink(a), len(arr), worst.after.Round(time.Millisecond))
		if n++; n == 40 {
			break
		}
	}
}

// rememberSim authors a CMB on mb: a short focus, or with fieldBytes set
// all seven fields filled with that many bytes of words drawn from g's
// random source.
func rememberSim(g *simGroup, mb *member, focus string, fieldBytes int) string {
	if fieldBytes == 0 {
		return mb.remember(focus, nil, "")
	}
	var f cmb.Fields
	for i := range f {
		var b strings.Builder
		b.WriteString(focus)
		for b.Len() < fieldBytes {
			fmt.Fprintf(&b, " %s", simWords[g.rng.IntN(len(simWords))])
		}
		f[i].Text = b.String()[:fieldBytes]
	}
	res, err := mb.n.Remember(context.Background(), node.RememberInput{Fields: f})
	if err != nil {
		mb.t.Fatalf("remember %q: %v", focus, err)
	}
	return res.Key
}

var simWords = strings.Fields(`agent memory node group mesh record gossip peer catch up fetch key
signature anchor recall drift lineage parent remix focus issue intent motivation perspective
mood commitment topic store index digest bucket minute second hour day latency link slow fast
budget quota roster author member session stream frame envelope epoch secret proof`)

// importMissed writes missed CMBs (1,000/s across the group, as the
// gossip path does) on k running members chosen at random, the first
// up to 20 of them authoring with their meshes detached so nothing is
// gossiped, and delivers each to the other k−1 through the receive
// pipeline a gossip delivery takes (Check from the author as the
// deliverer, Via gossip, then Accept: verified, judged and stored as
// gossip leaves it, without the network). It returns the k members,
// each holding want records.
func importMissed(t *testing.T, g *simGroup, missed, k, fieldBytes, want int, progress func(string)) []*member {
	ctx := context.Background()
	running := g.running()
	var holders []*member
	for _, i := range g.rng.Perm(len(running))[:min(k, len(running))] {
		holders = append(holders, running[i])
	}
	authors := holders[:min(20, len(holders))]
	since := time.Now().UnixMilli()
	for _, a := range authors {
		a.n.AttachMesh(nil)
	}
	for i := range missed {
		rememberSim(g, authors[i%len(authors)], fmt.Sprintf("missed %d", i), fieldBytes)
		if i%100 == 99 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, a := range authors {
		a.n.AttachMesh(a.m)
	}
	progress(fmt.Sprintf("%d missed CMBs written on %d authors, not gossiped", missed, len(authors)))
	for ai, a := range authors {
		if ai > 0 {
			progress(fmt.Sprintf("the missed CMBs of %d authors imported", ai))
		}
		q := node.ExportQuery{Since: since, Author: a.id}
		for {
			page, err := a.n.Export(ctx, q)
			if err != nil {
				t.Fatalf("export from %s: %v", a.id, err)
			}
			for _, l := range page.Records {
				rec, err := cmb.Decode(l.CMB)
				if err != nil {
					t.Fatalf("decode an exported record: %v", err)
				}
				for _, h := range holders {
					if h == a {
						continue
					}
					c, err := h.n.Check(ctx, rec, node.Source{NodeID: a.id, AuthorKey: l.PublicKey, AuthorE2E: l.E2EPublicKey, Via: node.SourceGossip})
					if err != nil {
						t.Fatalf("check %s at a holder: %v", rec.Key, err)
					}
					if _, err := h.n.Accept(ctx, c); err != nil {
						t.Fatalf("accept %s at a holder: %v", rec.Key, err)
					}
				}
			}
			if page.Next == "" {
				break
			}
			q.After = page.Next
		}
	}
	for _, h := range holders {
		if n := h.n.Store().Count(); n < want {
			t.Fatalf("a holder holds %d records, want %d", n, want)
		}
	}
	return holders
}

// payloadSize is the size of the newest record mb holds as an export line
// (record and author keys), which is most of its gossip message (the
// frame adds a timestamp, the private group's envelope its overhead).
func payloadSize(t *testing.T, mb *member) int {
	page, err := mb.n.Export(context.Background(), node.ExportQuery{Since: time.Now().Add(-time.Hour).UnixMilli()})
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("export for the payload size: %v (%d records)", err, len(page.Records))
	}
	l := page.Records[len(page.Records)-1]
	return len(l.CMB) + len(l.PublicKey) + len(l.E2EPublicKey)
}
