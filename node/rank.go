package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/lineage/walk"
	"github.com/cmbnode/cmbnode/store"
)

// Ranking for Recall and SearchText (docs/recall.md).
//
// A record's relevance combines two pieces of evidence, both in [0,1]:
//   - its own: store.Hit.Relevance, BM25 over its fields on the fixed scale
//     the store defines (or, where a Retriever is configured, the larger of
//     that and the Retriever's similarity);
//   - its thread's: the best own relevance among its parents and, apart,
//     the best that a child adds to the record's own, among the records
//     one hop away in walk.Thread, the same thread the CGP episode frame
//     tells. A conversation recorded turn by turn chains each turn to the
//     one before, so the turn that holds an answer is found through the
//     turn that asked the question, even when it shares no word with the
//     query. A parent is what a record responds to, so it lends its whole
//     relevance, at ParentWeight. A child responds to the record, and in
//     conversation often only echoes it or answers it by name: what it
//     holds of the query terms the record already holds is no further
//     evidence, so it lends, at ChildWeight, only the rest (its relevance
//     less, term by term, what of it the record holds too).
//
// relevance = min(1, own + ParentWeight·parent + ChildWeight·child): a
// record alone keeps its own relevance, so a lone record that holds the
// whole query scores near 1 as one with a thread does, and the thread's
// evidence adds to it up to 1.
const (
	// ParentWeight is how much of its best parent's relevance a record
	// takes; ChildWeight, of what its best child adds to its own.
	ParentWeight = 0.5
	ChildWeight  = 0.25
	// RecallRelevanceShare is relevance's share of a recall score; the
	// rest is recency, 2^(−age/recallHalfLife): enough to order equally
	// relevant records newest first, too little to lift an irrelevant one.
	RecallRelevanceShare = 0.95
	recallHalfLife       = 7 * 24 * time.Hour
	// A recall looks at candidateFactor × limit text hits (at least
	// minCandidates) and their neighbours: a record outside the text top
	// limit may enter it through its neighbours' evidence.
	candidateFactor = 3
	minCandidates   = 30
)

// rankParams are the ranking's settings. A Node holds its own
// (defaultRankParams) so that the evaluation can compare alternatives on
// one filled store.
type rankParams struct {
	parent, child float64 // ParentWeight, ChildWeight
	k1, b         float64 // BM25's, for SearchOptions
	fields        [store.NumFields]float64
	// wholeChild lends a child's whole relevance, not only what it adds
	// to the record's own (the evaluation's comparison).
	wholeChild bool
}

// defaultRankParams: k1 0.9 and b 0.4 rather than BM25's usual 1.2 and
// 0.75, because a record here is a short turn of a conversation or a
// note, whose length says little about how much of it is on topic: full
// length normalisation penalises the turn that says a thing at some
// length in favour of a short one that only names it.
var defaultRankParams = rankParams{parent: ParentWeight, child: ChildWeight, k1: 0.9, b: 0.4, fields: recallFieldWeights}

// recallFieldWeights are the text fields' BM25 weights (store.FieldNames
// order: focus, issue, intent, motivation, commitment, perspective, mood).
// What a record is about (focus) and whose view it is (perspective: who
// speaks, and when) weigh most. A question that names a person is most
// often about what that person said or did, so a name in a record's
// perspective is as much evidence as in its focus, where it is as often
// someone else addressing them; across many records a perspective's
// common words weigh little anyway, through their idf.
var recallFieldWeights = [store.NumFields]float64{1, 0.8, 0.8, 0.6, 0.8, 1, 0.4}

// Retriever is a second source of evidence beside the text index, such as
// a dense encoder's nearest neighbours. Retrieve returns up to limit held
// records most similar to query, each with a similarity in [0,1] on a
// fixed scale (comparable across queries, like store.Hit.Relevance),
// leaving out records created after asOf. A record's own relevance is the
// larger of its text relevance and its similarity; lineage then applies
// to both alike.
type Retriever interface {
	Retrieve(ctx context.Context, query string, limit int, asOf time.Time) ([]Evidence, error)
}

// Evidence is one record a Retriever found.
type Evidence struct {
	Key        string
	Similarity float64
}

// rankedKey is one candidate of a ranking.
type rankedKey struct {
	key       string
	createdAt int64 // ms: the store's order time for text hits, createdAt for neighbours
	relevance float64
	score     float64 // what compare orders by
}

// compare orders by score, then newer first, then key, so that equal
// scores rank the same way on every node.
func (a rankedKey) compare(b rankedKey) int {
	return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(b.createdAt, a.createdAt), cmp.Compare(a.key, b.key))
}

// rank returns the candidates for the best limit records for query as of
// asOf, with their relevance, best first. It may return more than limit
// (the candidates considered), and records that are quarantined or gone by
// the time they are read: callers skip those.
func (n *Node) rank(ctx context.Context, query string, limit int, asOf time.Time) ([]rankedKey, error) {
	return n.rankWith(ctx, query, nil, limit, asOf)
}

// rankWith is rank with an optional query vector in the dense kernel (a CGP
// query embedding); without one the dense index, if any, encodes query.
// Records the surface policy hides (admission.go) are left out of the
// result, but still lend their thread evidence.
func (n *Node) rankWith(ctx context.Context, query string, qvec []float32, limit int, asOf time.Time) ([]rankedKey, error) {
	m := min(max(candidateFactor*limit, minCandidates), MaxRecall)
	rp := n.rp
	so := store.SearchOptions{Limit: m, AsOf: asOf, FieldWeights: rp.fields, K1: rp.k1, B: rp.b}
	hits, err := n.st.Search(ctx, query, so)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	own := make(map[string]float64, len(hits))
	at := make(map[string]int64, len(hits))
	var seeds []string
	for _, h := range hits {
		own[h.Key], at[h.Key] = h.Relevance, h.CreatedAt
		seeds = append(seeds, h.Key)
	}
	if n.retriever != nil {
		ev, err := n.retriever.Retrieve(ctx, query, m, asOf)
		if err != nil {
			return nil, fmt.Errorf("retriever: %w", err)
		}
		for _, e := range ev {
			if _, ok := own[e.Key]; !ok {
				seeds = append(seeds, e.Key)
			}
			own[e.Key] = max(own[e.Key], min(max(e.Similarity, 0), 1))
		}
	}

	if n.dense != nil {
		if qvec == nil {
			qvec = n.encodeQuery(ctx, query)
		}
		if qvec != nil {
			for _, e := range n.dense.search(qvec, m, asOf) {
				if _, ok := own[e.Key]; !ok {
					seeds = append(seeds, e.Key)
				}
				own[e.Key] = max(own[e.Key], e.Similarity)
			}
		}
	}
	// Records whose author the query names (names.go): their name evidence
	// adds to their text relevance, capped at 1.
	named, namedAt, err := n.authorMatches(ctx, query, asOf.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("author names: %w", err)
	}
	var nameOnly []string
	for k := range named {
		if _, ok := own[k]; !ok {
			nameOnly = append(nameOnly, k)
			at[k] = namedAt[k]
		}
	}
	if len(nameOnly) > 0 {
		slices.Sort(nameOnly)
		rel, err := n.st.Relevance(ctx, query, nameOnly, so)
		if err != nil {
			return nil, fmt.Errorf("search: %w", err)
		}
		for _, k := range nameOnly {
			own[k] = rel[k]
		}
		seeds = append(seeds, nameOnly...)
	}
	for k, e := range named {
		own[k] = min(own[k]+e, 1)
	}

	// Each seed's thread neighbours, through the one lineage walk over the
	// store's in-memory lineage (the surfaced records), told apart into
	// its parents and its children.
	g := lineage.IndexedView(n.st)
	parentsOf := make(map[string][]string, len(seeds))
	childrenOf := make(map[string][]string, len(seeds))
	var unscored []string
	for _, k := range seeds {
		th, err := walk.Thread(ctx, g, k, walk.ThreadOptions{MaxDepth: 1, AsOf: &asOf})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue // gone since the search: it has no thread to lend
		}
		var parents []string
		if len(th) > 1 {
			vx, ok, err := g.Vertex(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("lineage of %s: %w", k, err)
			}
			if ok {
				parents = vx.Parents
			}
		}
		for _, v := range th {
			if v.Key == k {
				if _, ok := at[k]; !ok {
					at[k] = v.CreatedAt.UnixMilli()
				}
				continue
			}
			if slices.Contains(parents, v.Key) {
				parentsOf[k] = append(parentsOf[k], v.Key)
				childrenOf[v.Key] = append(childrenOf[v.Key], k)
			} else {
				childrenOf[k] = append(childrenOf[k], v.Key)
				parentsOf[v.Key] = append(parentsOf[v.Key], k)
			}
			if _, ok := at[v.Key]; !ok {
				at[v.Key] = v.CreatedAt.UnixMilli()
				unscored = append(unscored, v.Key)
			}
		}
	}
	// Neighbours the search did not return have a text relevance too.
	if len(unscored) > 0 {
		rel, err := n.st.Relevance(ctx, query, unscored, so)
		if err != nil {
			return nil, fmt.Errorf("search: %w", err)
		}
		for k, r := range rel {
			own[k] = r
		}
	}
	added, err := n.childEvidence(ctx, query, so, own, childrenOf, rp.wholeChild)
	if err != nil {
		return nil, err
	}
	// A neighbour that is not a seed knows only its seed neighbours: any
	// other of its neighbours scored below every seed, so leaving it out
	// changes its evidence by less than the weakest seed's.
	out := make([]rankedKey, 0, len(at))
	for k, t := range at {
		var parent float64
		for _, o := range parentsOf[k] {
			parent = max(parent, own[o])
		}
		r := min(1, own[k]+rp.parent*parent+rp.child*added[k])
		if r > 0 && !n.Hidden(k) {
			out = append(out, rankedKey{key: k, createdAt: t, relevance: r, score: r})
		}
	}
	slices.SortFunc(out, func(a, b rankedKey) int { return a.compare(b) })
	return out, nil
}

// childEvidence is, for each record with children in childrenOf, the most
// one of its children adds to its own relevance: the child's relevance
// less, term by term, the text evidence the record holds too (a child
// that repeats the record's words adds nothing for them). Evidence other
// than the text's (a Retriever's, a dense encoder's, an author's name)
// has no terms and counts whole. With whole, a child lends its whole
// relevance.
func (n *Node) childEvidence(ctx context.Context, query string, so store.SearchOptions, own map[string]float64, childrenOf map[string][]string, whole bool) (map[string]float64, error) {
	out := make(map[string]float64, len(childrenOf))
	// Only a record and a child that both hold some of the query can
	// share evidence; any other child lends its whole relevance.
	var keys []string
	for k, cs := range childrenOf {
		if own[k] == 0 {
			continue
		}
		for _, c := range cs {
			if own[c] > 0 {
				keys = append(keys, k, c)
			}
		}
	}
	var shares map[string][]float64
	if !whole && len(keys) > 0 {
		slices.Sort(keys)
		keys = slices.Compact(keys)
		var err error
		if _, shares, err = n.st.TermRelevance(ctx, query, keys, so); err != nil {
			return nil, fmt.Errorf("search: %w", err)
		}
	}
	for k, cs := range childrenOf {
		mine := shares[k]
		for _, c := range cs {
			lent := own[c]
			if theirs := shares[c]; mine != nil && theirs != nil {
				for i, x := range theirs {
					lent -= min(x, mine[i])
				}
			}
			out[k] = max(out[k], lent)
		}
	}
	return out, nil
}
