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
