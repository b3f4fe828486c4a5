package mesh_test

import (
	"context"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

// TestSVAFDecisionsOverTheMesh: over real libp2p hosts, b's cmb-accepted
// events carry SVAF's real decision and drift: a's first record bootstraps
// b's memory, a near-copy of it is redundant (of that record) and hidden
// from b's recall while kept, and an on-topic novel record is admitted.
func TestSVAFDecisionsOverTheMesh(t *testing.T) {
	ctx := context.Background()
	a := newMember(t, "alpha", "a", nil, nil)
	b := newMember(t, "alpha", "b", []*member{a}, nil)
	waitPeers(t, 1, a, b)
	sub := b.n.Events().Subscribe(64)
	defer sub.Close()

	next := func(what string) node.AcceptedEvent {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case e := <-sub.C:
				if e.Name == events.CMBAccepted {
					return e.Data.(node.AcceptedEvent)
				}
			case <-deadline:
				t.Fatalf("no cmb-accepted event for %s", what)
			}
		}
	}
	remember := func(focus string) string {
		t.Helper()
		var f cmb.Fields
		f[cmb.Focus].Text = focus
		f[cmb.Intent].Text = "plan the release"
		res, err := a.n.Remember(ctx, node.RememberInput{Fields: f})
		if err != nil {
			t.Fatal(err)
		}
		return res.Key
	}

	first := remember("The parser release ships on Friday after the code freeze")
	ev := next("the first record")
	if ev.Key != first || ev.Decision != "aligned" || ev.Drift == nil {
		t.Fatalf("first record: %+v, want aligned with a drift", ev)
	}
	dup := remember("The parser release ships on Friday, after the code freeze.")
	ev = next("the near-copy")
	if ev.Key != dup || ev.Decision != "redundant" || ev.Nearest != first || ev.Drift == nil || !ev.Hidden {
		t.Fatalf("near-copy: %+v, want redundant of %s, hidden", ev, first)
	}
	novel := remember("The parser release slips to Monday because the freeze moved")
	ev = next("the novel record")
	if ev.Key != novel || (ev.Decision != "aligned" && ev.Decision != "guarded") || ev.Hidden {
		t.Fatalf("novel record: %+v, want admitted and surfaced", ev)
	}
	hits, err := b.n.Recall(ctx, "parser release freeze", 10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, h := range hits {
		seen[h.Key] = true
	}
	if !seen[first] || !seen[novel] || seen[dup] {
		t.Fatalf("b recalls %v: want the first and the novel record, not the copy", seen)
	}
	if _, err := b.n.Get(ctx, dup); err != nil {
		t.Fatalf("the redundant record is not kept: %v", err)
	}
	// Status (and so `cmbnode status` and /metrics) counts the verdicts.
	counts := b.n.Status().SVAF
	if counts["redundant"] != 1 || counts["aligned"]+counts["guarded"] != 2 || counts["rejected"] != 0 {
		t.Fatalf("status counts verdicts %v, want 1 redundant and 2 admitted", counts)
	}
}
