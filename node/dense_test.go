package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
)

// topicsCatTrain are the fake encoder's topics in these tests.
var topicsCatTrain = [][]string{{"cat", "kitten", "feline"}, {"train", "rail"}, {"stove"}}

// waitIndexed waits until n's dense index holds want records, none pending.
func waitIndexed(t *testing.T, n *Node, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := n.Dense()
		if st.Pending == 0 && st.Indexed == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vectors not computed: %+v, want %d indexed", st, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHungEncoderNeverStallsReceiving: with a /v1/embeddings server that
// accepts requests and never answers, received broadcasts are judged with
// the hashed kernel and stored promptly (the encoder is waited for at most
// once, until the worker's next success), and their verdicts name the
// kernel that judged them. Once the server answers again and the worker
// has encoded the backlog, SVAF judges with the dense kernel.
func TestHungEncoderNeverStallsReceiving(t *testing.T) {
	ctx := context.Background()
	var hang atomic.Bool
	hang.Store(true)
	srv := fakeEncoderWith(t, topicsCatTrain, fakeKnobs{hang: &hang})
	// The request timeout is far longer than the test's bound: only the
	// node's own health rule can keep receiving prompt.
	enc, err := embed.NewHTTP(embed.HTTPOptions{URL: srv.URL + "/v1", Model: "fake", Dim: 4, Retries: -1, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	alice, am := openNode(t, "alice", "alpha")
	bob := openWith(t, "bob", Options{Encoder: enc, Dense: DenseOptions{MaxBackoff: 20 * time.Millisecond}})
	introduce(t, alice, bob)
	// While the encoder answers, bob's memory gets its vectors: every
	// anchor of what follows has vectors in the dense kernel.
	hang.Store(false)
	const before = 5
	for i := range before {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(fmt.Sprintf("the train %d leaves from platform %d", i, i))}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, bob, alice, am.published)
	waitIndexed(t, bob, before)
	am.published = nil
	hang.Store(true)
	const records = 20
	for i := range records {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(fmt.Sprintf("the kitten number %d sleeps by the stove", i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The old rule waited 2 s per record (40 s for 20); a few seconds is
	// generous for a loaded machine.
	const bound = 8 * time.Second
	start := time.Now()
	for i, r := range am.published {
		receive(t, bob, alice, []*cmb.Record{r})
		if el := time.Since(start); el > bound {
			t.Fatalf("%d of %d records accepted after %v with a hung encoder", i+1, records, el)
		}
	}
	hashed := embed.DefaultHashed().Kernel().ID
	for _, r := range am.published {
		if _, err := bob.Get(ctx, r.Key); err != nil {
			t.Fatalf("record %s not stored: %v", r.Key, err)
		}
		if v, ok := bob.VerdictOf(r.Key); !ok || v.Kernel != hashed {
			t.Fatalf("verdict %+v %t of a record judged while the encoder hung, want kernel %s", v, ok, hashed)
		}
	}
	hang.Store(false)
	waitIndexed(t, bob, before+records)
	if _, err := alice.Remember(ctx, RememberInput{Fields: fields("the kitten naps on the rail")}); err != nil {
		t.Fatal(err)
	}
	last := am.published[len(am.published)-1]
	receive(t, bob, alice, []*cmb.Record{last})
	k, _ := bob.EmbeddingsKernel()
	if v, ok := bob.VerdictOf(last.Key); !ok || v.Kernel != k.ID {
		t.Fatalf("verdict %+v %t once the encoder answers and every anchor has vectors, want kernel %s", v, ok, k.ID)
	}
}

// fakeHTTP is an HTTP encoder of dimension 4 over srv, kernel id kernel.
func fakeHTTP(t *testing.T, srvURL, kernel string) *embed.HTTP {
	t.Helper()
	enc, err := embed.NewHTTP(embed.HTTPOptions{URL: srvURL + "/v1", Model: "fake", KernelID: kernel, Dim: 4, Retries: -1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// TestDenseVectorsSurviveReopen: the vectors the worker computed are
// stored: reopened with the same encoder, a node holds them all at once,
// encodes nothing for them (the server sees no request until a query) and
// dense recall still finds a record through them.
func TestDenseVectorsSurviveReopen(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	srv := fakeEncoderWith(t, topicsCatTrain, fakeKnobs{calls: &calls})
	home := t.TempDir()
	o := Options{Encoder: fakeHTTP(t, srv.URL, ""), Dense: DenseOptions{MaxBackoff: 20 * time.Millisecond}}
	n := reopenableWith(t, home, "alice", o)
	kitten, err := n.Remember(ctx, RememberInput{Fields: fields("Pixel the kitten sleeps all day")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"the train leaves at nine", "soup simmers on the stove"} {
		if _, err := n.Remember(ctx, RememberInput{Fields: fields(f)}); err != nil {
			t.Fatal(err)
		}
	}
	waitIndexed(t, n, 3)
	n.Close()
	before := calls.Load()
	if before == 0 {
		t.Fatal("the encoder was never called")
	}

	n = reopenableWith(t, home, "alice", o)
	defer n.Close()
	if st, _ := n.Dense(); st.Indexed != 3 || st.Pending != 0 {
		t.Fatalf("after a reopen: %+v, want the 3 stored vectors, none pending", st)
	}
	// Give a wrongly woken worker the time to call the server.
	time.Sleep(200 * time.Millisecond)
	if c := calls.Load(); c != before {
		t.Fatalf("the encoder was called %d times after the reopen, for vectors already stored", c-before)
	}
	hits, err := n.Recall(ctx, "feline", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || hits[0].Key != kitten.Key {
		t.Fatalf("recall feline after a reopen: %+v, want the kitten", hits)
	}
	if c := calls.Load(); c != before+1 {
		t.Fatalf("a recall after the reopen made %d encoder calls, want 1 (the query)", c-before)
	}
}

// TestKernelChangeNeverMixesVectors: after the encoder changes kernel,
// vectors stored under the old one are never compared with the new one's:
// until the new kernel's backfill, a query vector finds nothing and SVAF
// judges with the hashed kernel; after it, the new vectors alone rank.
func TestKernelChangeNeverMixesVectors(t *testing.T) {
	ctx := context.Background()
	srvA := fakeEncoderWith(t, topicsCatTrain, fakeKnobs{})
	home := t.TempDir()
	n := reopenableWith(t, home, "bob", Options{Encoder: fakeHTTP(t, srvA.URL, "fake-a-d4")})
	alice, am := openNode(t, "alice", "alpha")
	introduce(t, alice, n)
	for _, f := range []string{"Pixel the kitten sleeps all day", "the train leaves at nine"} {
		if _, err := alice.Remember(ctx, RememberInput{Fields: fields(f)}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, n, alice, am.published)
	kitten, train := am.published[0].Key, am.published[1].Key
	waitIndexed(t, n, 2)
	if th, err := n.SearchVector(ctx, "", []float64{1, 0, 0, 0}, 5, time.Time{}); err != nil || len(th) != 1 || th[0].Key != kitten {
		t.Fatalf("kernel A, the cat direction: %+v %v, want the kitten", th, err)
	}
	n.Close()

	// Kernel B puts trains where A put cats; it is down at first.
	var down atomic.Bool
	down.Store(true)
	srvB := fakeEncoderWith(t, [][]string{{"train", "rail"}, {"cat", "kitten", "feline"}, {"stove"}}, fakeKnobs{down: &down})
	n = reopenableWith(t, home, "bob", Options{Encoder: fakeHTTP(t, srvB.URL, "fake-b-d4"), Dense: DenseOptions{MaxBackoff: 20 * time.Millisecond}})
	defer n.Close()
	if st, _ := n.Dense(); st.Kernel != "fake-b-d4" || st.Indexed != 0 || st.Pending != 2 {
		t.Fatalf("kernel B before its backfill: %+v, want nothing indexed, both pending", st)
	}
	if th, err := n.SearchVector(ctx, "", []float64{1, 0, 0, 0}, 5, time.Time{}); err != nil || len(th) != 0 {
		t.Fatalf("kernel B's query before its backfill: %+v %v, want nothing (A's vectors are not B's)", th, err)
	}
	if _, err := alice.Remember(ctx, RememberInput{Fields: fields("the kitten naps on the rail")}); err != nil {
		t.Fatal(err)
	}
	third := am.published[2]
	receive(t, n, alice, []*cmb.Record{third})
	if v, _ := n.VerdictOf(third.Key); v.Kernel != embed.DefaultHashed().Kernel().ID {
		t.Fatalf("verdict %+v with anchors that have only kernel A's vectors, want the hashed kernel", v)
	}
	down.Store(false)
	waitIndexed(t, n, 3)
	th, err := n.SearchVector(ctx, "", []float64{1, 0, 0, 0}, 5, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, h := range th {
		got[h.Key] = true
	}
	if !got[train] || !got[third.Key] || got[kitten] {
		t.Fatalf("kernel B, its train direction: %v, want the train and the rail record, not the kitten", got)
	}
}
