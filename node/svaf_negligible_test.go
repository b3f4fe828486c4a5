package node

import (
	"context"
	mrand "math/rand"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/svaf"
	"github.com/cmbnode/cmbnode/store"
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
		ev, _ := evaluableFields(&all)
		admit := bob.adm.recent > 0 && bob.adm.negligible(clock, &ev, recent)
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

// TestNegligibleIsTheFullSum: negligible, which may answer after the
// newest anchor's term, answers as the whole sum of the anchors' decays
// tested on every evaluable field does, for ages around where anchors stop
// weighing (≈19τ), field weights of 0, ½, 1 and 3, missing fields, and
// fewer anchors than Recent.
func TestNegligibleIsTheFullSum(t *testing.T) {
	cfg := svaf.Default()
	cfg.FieldWeights = map[string]float64{cmb.FieldNames[0]: 3, cmb.FieldNames[1]: 0, cmb.FieldNames[2]: 0.5}
	a, err := newAdmission(SVAFOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	full := func(now time.Time, ev *[cmb.NumFields]string, recent []store.KeyTime) bool {
		decay := 0.0
		for _, kt := range recent {
			decay += a.cfg.Decay(now.Sub(time.UnixMilli(kt.CreatedAt)))
		}
		if len(recent) >= a.recent && a.nearest > 0 {
			decay += float64(a.nearest) * a.cfg.Decay(now.Sub(time.UnixMilli(recent[len(recent)-1].CreatedAt)))
		}
		for i, t := range ev {
			if t != "" && !a.cfg.Negligible(cmb.FieldNames[i], decay) {
				return false
			}
		}
		return true
	}
	r := mrand.New(mrand.NewSource(5))
	now := time.UnixMilli(1_751_000_000_000)
	tau := a.cfg.Freshness
	counts := map[bool]int{}
	for range 20000 {
		var ev [cmb.NumFields]string
		for i := range ev {
			if r.Intn(3) > 0 {
				ev[i] = "text"
			}
		}
		recent := make([]store.KeyTime, r.Intn(a.recent+1))
		age := 17*tau + time.Duration(r.Int63n(int64(6*tau)))
		for i := range recent {
			recent[i] = store.KeyTime{Key: "k", CreatedAt: now.Add(-age).UnixMilli()}
			age += time.Duration(r.Int63n(int64(tau / 4)))
		}
		want := full(now, &ev, recent)
		counts[want]++
		if got := a.negligible(now, &ev, recent); got != want {
			t.Fatalf("negligible(%v, %v) = %t, the full sum says %t", ev, recent, got, want)
		}
	}
	if counts[true] < 1000 || counts[false] < 1000 {
		t.Fatalf("%d negligible, %d not: the ages miss the threshold", counts[true], counts[false])
	}
}
