package cgpnode

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/embed/embedtest"
	"github.com/cmbnode/cmbnode/node/identity"
)

// receiveFrom builds a record by carol, checks and accepts it into n; its
// parent is lineage[0], its ancestors all of lineage.
func receiveFrom(t *testing.T, n *node.Node, carol *identity.Identity, text string, at int64, lineage ...string) string {
	t.Helper()
	ctx := context.Background()
	rec, err := cmb.Build(cmb.Draft{Fields: fields(text), Group: "alpha", CreatedBy: carol.NodeID, CreatedAt: at, Parents: lineage[:min(len(lineage), 1)], Ancestors: lineage}, carol.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Check(ctx, rec, node.Source{PeerID: "peer-carol", NodeID: carol.NodeID, AuthorKey: carol.PublicKeyB64(), AuthorE2E: carol.E2EPublicKeyDER(), Via: "gossip"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Accept(ctx, c); err != nil {
		t.Fatal(err)
	}
	return rec.Key
}

// frameKeys are the record keys each frame of res names, by frame kind.
func frameKeys(res *cgp.ContextQueryResult) (memories, members map[string]bool) {
	memories, members = map[string]bool{}, map[string]bool{}
	for _, f := range res.Frames {
		switch f.Kind {
		case cgp.KindMemory:
			memories[f.ID[strings.IndexByte(f.ID, ':')+1:]] = true
		case cgp.KindEpisode:
			for _, r := range f.Relations {
				if r.Rel == cgp.RelMember {
					members[r.TargetURI[strings.LastIndexByte(r.TargetURI, '/')+1:]] = true
				}
			}
		}
	}
	return memories, members
}

// TestCGPHidesHiddenMembers: CGP follows the surface policy as recall and
// the socket's thread do: a redundant near-copy is no member of another
// record's episode nor a frame reached as an anchor's neighbour, while the
// reply to it still is; anchored on the copy itself, it is served.
func TestCGPHidesHiddenMembers(t *testing.T) {
	ctx := context.Background()
	n := openAlice(t)
	carol, err := identity.Create(t.TempDir(), "carol", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.PinPeer(ctx, carol.NodeID, carol.PublicKey(), carol.X25519.PublicKey().Bytes(), "carol"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	first := "The walrus parade starts at the harbour on Friday"
	root := receiveFrom(t, n, carol, first, now-3000)
	dup := receiveFrom(t, n, carol, first+".", now-2000, root)
	reply := receiveFrom(t, n, carol, "then the brass band plays until dusk", now-1000, dup, root)
	if !n.Hidden(dup) {
		t.Fatal("the near-copy is not hidden")
	}
	eng, err := cgp.NewEngine(cgp.Config{Backend: NewBackend(n), Group: n.Group(), SigningKey: n.Identity().Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Query(ctx, &cgp.ContextQuery{Goal: "walrus parade harbour", MaxFrames: 8, MaxTokens: 8000})
	if err != nil {
		t.Fatal(err)
	}
	mem, members := frameKeys(res)
	if mem[dup] || members[dup] || !members[root] || !members[reply] {
		t.Fatalf("query: memory frames %v, episode members %v; want the root's episode with the reply, never the hidden copy", mem, members)
	}
	res, err = eng.Query(ctx, &cgp.ContextQuery{Goal: "x", Anchors: []string{cgp.CMBURI("alpha", root)}, MaxFrames: 8, MaxTokens: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if mem, members := frameKeys(res); mem[dup] || members[dup] || !mem[root] {
		t.Fatalf("anchored on the root: memory frames %v, members %v; want no hidden copy", mem, members)
	}
	res, err = eng.Query(ctx, &cgp.ContextQuery{Goal: "x", Anchors: []string{cgp.CMBURI("alpha", dup)}, MaxFrames: 8, MaxTokens: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if mem, _ := frameKeys(res); !mem[dup] {
		t.Fatalf("anchored on the hidden copy itself: memory frames %v, want it served", mem)
	}
}

// TestCGPQueryEmbedding: with an encoder configured, the engine declares
// its kernel's fingerprint and ranks with a query embedding of its
// dimension (frames come back for a vector alone, which no text matches);
// an embedding of another length is refused as bad_request, and a node
// without an encoder refuses every embedding.
func TestCGPQueryEmbedding(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(embedtest.Handler(func(in string) []float32 {
		v := []float32{0, 0, 0.1}
		if strings.Contains(in, "kitten") {
			v[0] = 1
		} else {
			v[1] = 1
		}
		return v
	}))
	defer srv.Close()
	enc, err := embed.NewHTTP(embed.HTTPOptions{URL: srv.URL + "/v1", Model: "fake", Dim: 3, Retries: -1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	id, err := identity.Create(home, "alice", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "alpha", Identity: id, Encoder: enc})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	kitten, err := n.Remember(ctx, node.RememberInput{Fields: fields("Pixel the kitten sleeps all day")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Remember(ctx, node.RememberInput{Fields: fields("the train leaves at nine")}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := n.Dense(); st.Indexed == 2 && st.Pending == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("vectors not computed: %+v", st)
		}
	}
	cfg := Config(n, n.Identity(), "test", slog.New(slog.DiscardHandler))
	if cfg.EmbeddingsFingerprint != "fake/3/l2" || cfg.EmbeddingDim != 3 {
		t.Fatalf("engine declares %q of %d, want fake/3/l2 of 3", cfg.EmbeddingsFingerprint, cfg.EmbeddingDim)
	}
	eng, err := cgp.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Query(ctx, &cgp.ContextQuery{Goal: "zzz", Embedding: []float64{1, 0, 0}, Kinds: []string{cgp.KindMemory}, MaxFrames: 4, MaxTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if mem, _ := frameKeys(res); len(mem) != 1 || !mem[kitten.Key] {
		t.Fatalf("query embedding in the kitten's direction: memory frames %v, want the kitten's alone", mem)
	}
	var ce *cgp.Error
	if _, err := eng.Query(ctx, &cgp.ContextQuery{Goal: "zzz", Embedding: []float64{1, 0}, MaxFrames: 4, MaxTokens: 4000}); !errors.As(err, &ce) || ce.Code != cgp.CodeBadRequest {
		t.Fatalf("an embedding of 2 numbers for a kernel of 3: %v, want bad_request", err)
	}
	plain, err := cgp.NewEngine(Config(openAlice(t), id, "test", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Query(ctx, &cgp.ContextQuery{Goal: "zzz", Embedding: []float64{1, 0, 0}, MaxFrames: 4, MaxTokens: 4000}); !errors.As(err, &ce) || ce.Code != cgp.CodeBadRequest {
		t.Fatalf("an embedding sent to a node without an encoder: %v, want bad_request", err)
	}
}
