package node

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestRecallThreadEvidenceByDirection checks that a record takes half its
// parent's own relevance and a quarter of its child's: the reply to a
// turn that holds the query's words ranks above the turn said before it,
// though neither holds a word of the query.
func TestRecallThreadEvidenceByDirection(t *testing.T) {
	ctx := context.Background()
	n := openEvalNode(t)
	say := func(speaker, text string, parents ...string) string {
		t.Helper()
		res, err := n.Remember(ctx, RememberInput{Fields: evalFields(evalTurn{speaker: speaker, text: text, date: time.Date(2023, 5, 1, 0, 0, 0, 0, time.UTC)}), Parents: parents})
		if err != nil {
			t.Fatal(err)
		}
		return res.Key
	}
	for range 20 {
		say("Ann", "We had a quiet evening at home, nothing much to report.")
	}
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
