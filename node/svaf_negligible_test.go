package node

import (
	"context"
	mrand "math/rand"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// TestNegligibleAnchorsSkipEvaluation: a record whose anchors all weigh
// nothing (far older than τ) is admitted without a search for its nearest
// anchors or an evaluation, and its verdict is what the full evaluation
// of all its anchors reaches. Records arrive fresh, hours old, and around
// the ages where anchors stop weighing, as near copies of earlier
// ones and as new texts, while the clock jumps ahead as it does
// for a node that was offline.
func TestNegligibleAnchorsSkipEvaluation(t *testing.T) {
	ctx := context.Background()
	aliceID, bobHome, bobID := seededIdentities(t)
	clock := time.UnixMilli(1_751_000_000_000)
	bob, err := Open(Options{Home: bobHome, Group: "alpha", Identity: bobID, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	if err := bob.PinPeer(ctx, aliceID.NodeID, aliceID.PublicKey(), aliceID.X25519.PublicKey().Bytes(), "alice"); err != nil {
		t.Fatal(err)
	}
	tau := bob.adm.cfg.Freshness
	src := Source{PeerID: "p", NodeID: aliceID.NodeID, AuthorKey: aliceID.PublicKeyB64(), AuthorE2E: aliceID.E2EPublicKeyDER(), Via: "test"}
	r := mrand.New(mrand.NewSource(3))
	vocab := benchtext.Vocab(r, 400)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	var prev []cmb.Fields
	skipped, evaluated := 0, 0
	decisions := map[svaf.Decision]int{}
	for i := range 400 {
		clock = clock.Add(37 * time.Second)
		var age time.Duration
		switch phase := i / 100; phase {
		case 0, 2: // fresh
			age = time.Duration(r.Int63n(int64(time.Hour)))
		case 1: // around where anchors stop weighing, and far older
			age = 22*tau + time.Duration(r.Int63n(int64(40*tau)))
		case 3:
			age = 15*tau + time.Duration(r.Int63n(int64(30*tau)))
		}
		if i%100 == 0 && i > 0 {
			clock = clock.Add(30 * tau) // offline
		}
		var f cmb.Fields
		switch {
		case len(prev) > 0 && i%3 == 0:
			f = prev[r.Intn(len(prev))] // a near copy (a key names the texts)
			f[r.Intn(cmb.NumFields)].Text += " " + vocab[r.Intn(len(vocab))]
		default:
			for j := range f {
				f[j].Text = benchtext.Field(cmb.FieldNames[j]+":", 200, vocab, z)
			}
		}
		prev = append(prev, f)
		rec, err := cmb.Build(cmb.Draft{Fields: f, Group: "alpha", CreatedBy: aliceID.NodeID, CreatedAt: clock.Add(-age).UnixMilli()}, aliceID.Ed25519)
		if err != nil {
			t.Fatal(err)
		}
		// The full evaluation, against every anchor: the reference.
		all := rec.Fields.Texts()
		texts := fieldTexts(all)
		kts, err := anchorsOf(ctx, bob, "alpha", sigOf(bob, &all))
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := bob.evaluate(ctx, bob.adm.work(), rec, texts, nil, kts, clock)
		if err != nil {
			t.Fatal(err)
		}
		// judge's shortcut: the newest anchors all weigh nothing.
		recent, err := bob.recentAnchors(ctx, "alpha")
		if err != nil {
			t.Fatal(err)
		}
		admit := bob.adm.recent > 0 && bob.adm.negligible(clock, texts, recent)
		if admit {
			skipped++
		} else {
			evaluated++
		}
		c, err := bob.Check(ctx, rec, src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Accept(ctx, c); err != nil {
			t.Fatal(err)
		}
		got, ok := bob.verdict(rec.Key)
		if !ok || got.Decision != want.Decision || got.Drift != want.Drift || got.Nearest != want.Nearest || got.Kernel != want.Kernel {
			t.Fatalf("record %d (age %v, skipped %t): verdict %+v, the full evaluation's %+v", i, age, admit, got, want)
		}
		decisions[got.Decision]++
	}
	if skipped < 50 || evaluated < 50 || decisions[svaf.Redundant] == 0 || decisions[svaf.Rejected]+decisions[svaf.Guarded] == 0 {
		t.Fatalf("skipped %d, evaluated %d, verdicts %v: the stream must exercise both ways", skipped, evaluated, decisions)
	}
	t.Logf("skipped %d, evaluated %d, verdicts %v", skipped, evaluated, decisions)
}
