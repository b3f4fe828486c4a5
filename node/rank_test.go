package node

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/store"
)

// threadNode opens a node holding 20 turns of small talk, and say, which
// remembers a conversation turn with the given parents.
func threadNode(t *testing.T) (*Node, func(speaker, text string, parents ...string) string) {
	n := openEvalNode(t)
	say := func(speaker, text string, parents ...string) string {
		t.Helper()
		res, err := n.Remember(context.Background(), RememberInput{Fields: evalFields(evalTurn{speaker: speaker, text: text, date: time.Date(2023, 5, 1, 0, 0, 0, 0, time.UTC)}), Parents: parents})
		if err != nil {
			t.Fatal(err)
		}
		return res.Key
	}
	for range 20 {
		say("Ann", "We had a quiet evening at home, nothing much to report.")
	}
	return n, say
}

// TestRecallThreadEvidenceByDirection checks that a record takes half its
// parent's own relevance and a quarter of its child's: the reply to a
// turn that holds the query's words ranks above the turn said before it,
// though neither holds a word of the query.
func TestRecallThreadEvidenceByDirection(t *testing.T) {
	ctx := context.Background()
	n, say := threadNode(t)
	// before → asks (holds "kitten") → reply.
	before := say("Ann", "Morning! The weather is lovely today.")
	asks := say("Bob", "Did you end up adopting that kitten?", before)
	reply := say("Ann", "Yes, she is called Luna.", asks)

	hits, err := n.SearchText(ctx, "kitten", 10, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	rel := map[string]float64{}
	for _, h := range hits {
		rel[h.Key] = h.Relevance
	}
	if len(hits) != 3 || hits[0].Key != asks || hits[1].Key != reply || hits[2].Key != before {
		t.Fatalf("hits %v, want the question, its reply, the turn before it", hits)
	}
	// The question's relevance is its own (its neighbours hold nothing):
	// the one record holding the query's one word, once in a short focus,
	// is at about 0.55 of BM25's saturation, not held down for having a
	// thread that does not hold it.
	if rel[asks] < 0.5 {
		t.Errorf("question relevance %.4f, want its own (> 0.5)", rel[asks])
	}
	if got := rel[reply] / rel[asks]; math.Abs(got-ParentWeight) > 1e-9 {
		t.Errorf("reply/question relevance %.4f, want %.2f", got, ParentWeight)
	}
	if got := rel[before] / rel[asks]; math.Abs(got-ChildWeight) > 1e-9 {
		t.Errorf("turn before/question relevance %.4f, want %.2f", got, ChildWeight)
	}
}

// TestRecallChildLendsWhatItAdds checks that a child lends only the
// evidence its record lacks: a reply that repeats the record's query word
// adds nothing to it, and a reply that holds the query word the record
// lacks lends a quarter of that word's evidence.
func TestRecallChildLendsWhatItAdds(t *testing.T) {
	ctx := context.Background()
	n, say := threadNode(t)
	told := say("Ann", "We adopted a kitten called Luna.")
	// The echo holds Luna too, in a longer text: less of it than told.
	echo := say("Bob", "Luna is such a lovely name, I am so happy for you both, congratulations on everything.", told)
	named := say("Ann", "She is called Luna.")
	asks := say("Bob", "Is that the kitten?", named)

	const q = "kitten Luna"
	hits, err := n.SearchText(ctx, q, 10, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	rel := map[string]float64{}
	for _, h := range hits {
		rel[h.Key] = h.Relevance
	}
	rp := n.rp
	own, err := n.st.Relevance(ctx, q, []string{told, echo, named, asks}, store.SearchOptions{FieldWeights: rp.fields, K1: rp.k1, B: rp.b})
	if err != nil {
		t.Fatal(err)
	}
	if own[echo] == 0 || own[asks] == 0 {
		t.Fatalf("own relevance %v: the replies should match", own)
	}
	if math.Abs(rel[told]-own[told]) > 1e-9 {
		t.Errorf("told: relevance %.4f, own %.4f: an echo of its own word lent evidence", rel[told], own[told])
	}
	if want := own[named] + ChildWeight*own[asks]; math.Abs(rel[named]-want) > 1e-9 {
		t.Errorf("named: relevance %.4f, want own %.4f + %.2f × the reply's %.4f", rel[named], own[named], ChildWeight, own[asks])
	}
}
