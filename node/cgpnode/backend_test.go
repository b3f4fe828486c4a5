package cgpnode

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/identity"
)

func fields(focus string) cmb.Fields {
	var f cmb.Fields
	f[cmb.Focus].Text = focus
	return f
}

func TestBackendServesTheStore(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	id, err := identity.Create(home, "alice", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "alpha", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	var root string
	for i := 0; i < 20; i++ {
		res, err := n.Remember(ctx, node.RememberInput{Fields: fields(fmt.Sprintf("parser rollout step %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			root = res.Key
		}
	}
	child, _ := n.Remember(ctx, node.RememberInput{Fields: fields("rollout finished, zebra"), Parents: []string{root}})
	eng, err := cgp.NewEngine(cgp.Config{Backend: NewBackend(n), Group: n.Group(), SigningKey: n.Identity().Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Query(ctx, &cgp.ContextQuery{Goal: "zebra", MaxFrames: 8, MaxTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Frames) == 0 || res.Frames[0].ID == "" {
		t.Fatalf("no frames for a term one record holds: %+v", res)
	}
	var sawEpisode bool
	for _, f := range res.Frames {
		if f.Score < 0 || f.Score > 1 {
			t.Fatalf("score %v outside [0,1]", f.Score)
		}
		sawEpisode = sawEpisode || f.Kind == cgp.KindEpisode
	}
	if !sawEpisode {
		t.Fatalf("the remix thread did not yield an episode frame")
	}
	if len(res.FrameAttestations) != len(res.Frames) {
		t.Fatalf("attestations %d for %d frames", len(res.FrameAttestations), len(res.Frames))
	}
	// More records match "rollout" than one frame can hold: truncated, honestly.
	res, err = eng.Query(ctx, &cgp.ContextQuery{Goal: "rollout", MaxFrames: 1, MaxTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Frames) != 1 || !res.Truncated || res.DroppedEstimate == nil || *res.DroppedEstimate == 0 {
		t.Fatalf("budget of 1 frame: %d frames, truncated %v", len(res.Frames), res.Truncated)
	}
	b := NewBackend(n)
	rec, ok, err := b.Get(ctx, child.Key)
	if err != nil || !ok || rec.AuthorName != "alice" || len(rec.Parents) != 1 {
		t.Fatalf("get: %+v %v %v", rec, ok, err)
	}
	if _, ok, _ := b.Get(ctx, "cmb1-"+fmt.Sprintf("%064d", 0)); ok {
		t.Fatal("missing record reported held")
	}
}
