package cgpnode

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
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

// openAlice opens a node named alice in group alpha in a fresh home.
func openAlice(t *testing.T) *node.Node {
	t.Helper()
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
	return n
}

func TestBackendServesTheStore(t *testing.T) {
	ctx := context.Background()
	n := openAlice(t)
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

// A record whose author key came only with its gossiped frame reaches CGP
// as lower provenance: its mmp.cmb link's method ends in +unconfirmed-key,
// and loses it once a handshake confirms that key. Our own records carry
// no such mark.
func TestCGPMarksUnconfirmedKeyAsLowerProvenance(t *testing.T) {
	ctx := context.Background()
	n := openAlice(t)
	carol, err := identity.Create(t.TempDir(), "carol", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cmb.Build(cmb.Draft{Fields: fields("carol heard about the walrus"), Group: "alpha", CreatedBy: carol.NodeID, CreatedAt: 1_751_000_000_000}, carol.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Check(ctx, rec, node.Source{PeerID: "peer-bob", NodeID: "bob", AuthorKey: carol.PublicKeyB64(), AuthorE2E: carol.E2EPublicKeyDER(), Via: "gossip"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Accept(ctx, c); err != nil {
		t.Fatal(err)
	}
	own, err := n.Remember(ctx, node.RememberInput{Fields: fields("alice saw the walrus herself")})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := cgp.NewEngine(cgp.Config{Backend: NewBackend(n), Group: n.Group(), SigningKey: n.Identity().Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	// methods returns the method of the mmp.cmb link of each frame, by the
	// record key its URI names.
	methods := func() map[string]string {
		t.Helper()
		res, err := eng.Query(ctx, &cgp.ContextQuery{Goal: "walrus", MaxFrames: 8, MaxTokens: 4000})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, f := range res.Frames {
			for _, l := range f.Provenance {
				if l.Type != "mmp.cmb" || l.URI == nil || l.Method == nil {
					continue
				}
				for _, k := range []string{rec.Key, own.Key} {
					if strings.HasSuffix(*l.URI, k) {
						out[k] = *l.Method
					}
				}
			}
		}
		return out
	}
	m := methods()
	if !strings.HasSuffix(m[rec.Key], "+unconfirmed-key") {
		t.Fatalf("frame-keyed record's provenance method %q, want it marked +unconfirmed-key (all: %v)", m[rec.Key], m)
	}
	if m[own.Key] == "" || strings.Contains(m[own.Key], "unconfirmed") {
		t.Fatalf("our own record's provenance method %q, want one without the mark", m[own.Key])
	}
	if err := n.PinPeer(ctx, carol.NodeID, carol.PublicKey(), carol.X25519.PublicKey().Bytes(), "carol"); err != nil {
		t.Fatal(err)
	}
	if m := methods(); m[rec.Key] == "" || strings.Contains(m[rec.Key], "unconfirmed") {
		t.Fatalf("after the handshake confirmed carol's key the method is %q, want it unmarked", m[rec.Key])
	}
}
