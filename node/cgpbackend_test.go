package node

import (
	"context"
	"fmt"
	"testing"

	"cmbnode/node/cgp"
)

func TestCGPBackendServesTheStore(t *testing.T) {
	ctx := context.Background()
	n, _ := openNode(t, "alice", "alpha")
	var root string
	for i := 0; i < 20; i++ {
		res, err := n.Remember(ctx, RememberInput{Fields: fields(fmt.Sprintf("parser rollout step %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			root = res.Key
		}
	}
	child, _ := n.Remember(ctx, RememberInput{Fields: fields("rollout finished, zebra"), Parents: []string{root}})
	eng, err := cgp.NewEngine(cgp.Config{Backend: n.CGPBackend(), Group: n.Group(), SigningKey: n.Identity().Ed25519})
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
	rec, ok, err := n.CGPBackend().Get(ctx, child.Key)
	if err != nil || !ok || rec.AuthorName != "alice" || len(rec.Parents) != 1 {
		t.Fatalf("get: %+v %v %v", rec, ok, err)
	}
	if _, ok, _ := n.CGPBackend().Get(ctx, "cmb1-"+fmt.Sprintf("%064d", 0)); ok {
		t.Fatal("missing record reported held")
	}
}
