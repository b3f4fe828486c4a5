package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blevesearch/segment"
)

func TestTokenize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Hello, World!", "hello world"},
		{"can't stop; won’t stop", "can't stop won’t stop"},
		{"pi is 3.14, not 1,000.5", "pi is 3.14 not 1,000.5"},
		{"STRASSE Straße", "strasse strasse"}, // full case folding
		{"Cafe\u0301 café", "café café"},      // NFC
		{"snake_case and kebab-case", "snake_case and kebab case"},
		{"end. Next", "end next"},
		{"東京タワー", "東 京 タワー"}, // ideographs one by one, katakana as a word
		{"emoji 🙂 split", "emoji split"},
		{"ΣΊΣΥΦΟΣ", "σίσυφοσ"},
		{"", ""},
	} {
		if got := strings.Join(Tokenize(c.in), " "); got != c.want {
			t.Errorf("Tokenize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// tokenizeRef is Tokenize by the segmenter alone: the whole folded text
// through github.com/blevesearch/segment, its word segments kept.
func tokenizeRef(text string) []string {
	s, _ := fold(text)
	segs, types, _, err := segment.SegmentWordsDirect([]byte(s), nil, nil)
	if err != nil {
		panic(fmt.Sprintf("segmenting %q: %v", s, err))
	}
	var out []string
	for i, seg := range segs {
		if types[i] != segment.None {
			out = append(out, string(seg))
		}
	}
	return out
}

// TestTokenizeMatchesSegmenter holds Tokenize, which segments ASCII pieces
// itself and cuts at white space, to the segmenter's words on the whole
// text.
func TestTokenizeMatchesSegmenter(t *testing.T) {
	pieces := []string{"a", "Z", "7", "_", " ", "'", ".", ":", ",", ";", "-", "!", "é", "ß", "東", "\u200d", "\u00ad", "’", "٣", "x1", "A.B", "3,4", "\t", "\n", "\r", "\u0301", "タ", "🙂", "\u00a0", "\u3000"}
	rng := rand.New(rand.NewPCG(5, 5))
	for range 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		in := b.String()
		if got, want := Tokenize(in), tokenizeRef(in); !slices.Equal(got, want) {
			t.Fatalf("Tokenize(%q) = %q, reference %q", in, got, want)
		}
	}
}

func searchKeys(t *testing.T, s *Store, q string, o SearchOptions) []string {
	t.Helper()
	hits, err := s.Search(context.Background(), q, o)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Key
		if i > 0 && h.Score > hits[i-1].Score {
			t.Fatalf("hits out of order: %+v", hits)
		}
	}
	return out
}

func TestSearchRanking(t *testing.T) {
	now := time.UnixMilli(testBase + 10*24*3600*1000)
	s, err := Open(t.TempDir(), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var es []Entry
	for i := range 40 {
		es = append(es, mkEntry(fmt.Sprintf("filler%d", i), testBase+int64(i),
			"network sync status report", "latency", "keep peers in sync", "", "", "", "calm"))
	}
	rare := mkEntry("rare", testBase+100, "network sync status report with zephyrine", "latency")
	// Same words, different fields: weights decide which comes first.
	inFocus := mkEntry("infocus", testBase+200, "quorum", "", "", "", "", "", "")
	inMood := mkEntry("inmood", testBase+200, "", "", "", "", "", "", "quorum")
	// Recency: identical texts, one old and one recent.
	oldTwin := mkEntry("oldtwin", testBase, "marmalade")
	newTwin := mkEntry("newtwin", now.UnixMilli()-1000, "marmalade")
	other := mkEntry("othergroup", testBase+300, "zephyrine elsewhere")
	other.Group = "g2"
	es = append(es, rare, inFocus, inMood, oldTwin, newTwin, other)
	if _, err := s.PutMany(context.Background(), itemsOf(es)); err != nil {
		t.Fatal(err)
	}

	got := searchKeys(t, s, "network sync zephyrine", SearchOptions{Group: "g1"})
	if len(got) != 10 || got[0] != rare.Key {
		t.Fatalf("rare term did not rank its record first: %v", got)
	}
	// MaxTerms keeps the rarest: the common words no longer match.
	if got := searchKeys(t, s, "network sync zephyrine", SearchOptions{Group: "g1", MaxTerms: 1}); len(got) != 1 || got[0] != rare.Key {
		t.Fatalf("MaxTerms 1 should score only the rare term: %v", got)
	}
	if got := searchKeys(t, s, "network sync zephyrine", SearchOptions{Group: "g1", MaxTerms: 3}); len(got) != 10 || got[0] != rare.Key {
		t.Fatalf("MaxTerms at the query's length should change nothing: %v", got)
	}
	if got := searchKeys(t, s, "zephyrine", SearchOptions{}); len(got) != 2 {
		t.Fatalf("any group: %v", got)
	}
	if got := searchKeys(t, s, "ZEPHYRINE!", SearchOptions{Group: "g2"}); len(got) != 1 || got[0] != other.Key {
		t.Fatalf("group filter / case folding: %v", got)
	}

	focusFirst := SearchOptions{FieldWeights: [NumFields]float64{3, 1, 1, 1, 1, 1, 1}}
	moodFirst := SearchOptions{FieldWeights: [NumFields]float64{1, 1, 1, 1, 1, 1, 3}}
	if got := searchKeys(t, s, "quorum", focusFirst); len(got) != 2 || got[0] != inFocus.Key {
		t.Fatalf("focus weight: %v", got)
	}
	if got := searchKeys(t, s, "quorum", moodFirst); len(got) != 2 || got[0] != inMood.Key {
		t.Fatalf("mood weight: %v", got)
	}
	onlyMood := SearchOptions{FieldWeights: [NumFields]float64{0, 0, 0, 0, 0, 0, 1}}
	if got := searchKeys(t, s, "quorum", onlyMood); len(got) != 1 || got[0] != inMood.Key {
		t.Fatalf("zero weight should exclude a field: %v", got)
	}

	// Without recency the twins tie and the newer wins the tie-break; with
	// recency the newer one also scores strictly higher.
	hits, _ := s.Search(context.Background(), "marmalade", SearchOptions{RecencyWeight: 1, HalfLife: 24 * time.Hour})
	if len(hits) != 2 || hits[0].Key != newTwin.Key || hits[0].Score <= hits[1].Score || hits[0].Recency <= hits[1].Recency {
		t.Fatalf("recency: %+v", hits)
	}
	// AsOf hides what did not exist yet.
	if got := searchKeys(t, s, "marmalade", SearchOptions{AsOf: time.UnixMilli(testBase + 1)}); len(got) != 1 || got[0] != oldTwin.Key {
		t.Fatalf("as-of: %v", got)
	}
	if got := searchKeys(t, s, "neutral", SearchOptions{}); len(got) != 0 {
		t.Fatalf("the neutral placeholder should not be indexed: %v", got)
	}
	if got := searchKeys(t, s, "  ,,, ", SearchOptions{}); len(got) != 0 {
		t.Fatalf("empty query: %v", got)
	}
	if got := searchKeys(t, s, "sync", SearchOptions{Limit: 3}); len(got) != 3 {
		t.Fatalf("limit: %v", got)
	}
}

// TestSearchPruningIsExact checks that MaxScore pruning returns exactly what
// scoring every posting returns, on a Zipf corpus where pruning kicks in.
func TestSearchPruningIsExact(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{Now: func() time.Time { return time.UnixMilli(testBase + 3000*1000) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := newCorpus(9)
	var items []Item
	for i := range 3000 {
		e := c.record(i, testBase+int64(i)*1000)
		if i%3 == 0 {
			e.Group = "other"
		}
		items = append(items, Item{Entry: e})
	}
	if _, err := s.PutMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	qc := newCorpus(10)
	for i := range 300 {
		// Some queries are long, as a whole record's text is when
		// admission looks for a record's nearest anchors.
		nw := 1 + i%5
		if i%10 == 9 {
			nw = 80
		}
		q := qc.words(nw)
		o := SearchOptions{Limit: 1 + i%12, RecencyWeight: float64(i%3) * 0.7, HalfLife: time.Hour}
		if i%4 == 0 {
			o.Group = "other"
		}
		if i%5 == 0 {
			o.FieldWeights = [NumFields]float64{2, 0, 1, 1, 0.5, 1, 3}
		}
		if i%7 == 0 {
			o.AsOf = time.UnixMilli(testBase + 1500*1000)
		}
		// Half the queries take BM25's tf factor from the table.
		s.idx.tableMin = partTableMin
		if i%2 == 0 {
			s.idx.tableMin = 0
		}
		pruned, _ := s.Search(ctx, q, o)
		s.idx.exhaustive = true
		full, _ := s.Search(ctx, q, o)
		s.idx.exhaustive = false
		if len(pruned) != len(full) {
			t.Fatalf("query %q %+v: %d hits pruned, %d exhaustive", q, o, len(pruned), len(full))
		}
		for j := range full {
			if pruned[j].Key != full[j].Key || math.Abs(pruned[j].Score-full[j].Score) > 1e-9 {
				t.Fatalf("query %q %+v: hit %d differs: %+v vs %+v", q, o, j, pruned[j], full[j])
			}
		}
	}
}

// TestSearchSeesAcknowledgedWrites checks read-your-writes through the
// indexer, which runs behind the acknowledgement: a search started after a
// put returned finds it, under concurrent writers, and purged records vanish
// from search as soon as the purge returns.
func TestSearchSeesAcknowledgedWrites(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				term := fmt.Sprintf("uniq%dx%d", w, i)
				e := mkEntry(fmt.Sprintf("w%d-%d", w, i), testBase+int64(i), "common words "+term)
				if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
					errc <- err
					return
				}
				hits, err := s.Search(ctx, term, SearchOptions{})
				if err != nil || len(hits) != 1 || hits[0].Key != e.Key {
					errc <- fmt.Errorf("search %q right after its put: %v %v", term, hits, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.PurgeBefore(ctx, testBase+30)
	if err != nil || res.Deleted != 8*30 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if hits, err := s.Search(ctx, "uniq3x7", SearchOptions{}); err != nil || len(hits) != 0 {
		t.Fatalf("purged record still found: %v %v", hits, err)
	}
	if hits, err := s.Search(ctx, "common", SearchOptions{Limit: 1000}); err != nil || len(hits) != 8*30 {
		t.Fatalf("%d hits after purge, want %d (%v)", len(hits), 8*30, err)
	}
	// A search waiting for the index gives up with its context.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	s.ackedSeq.Add(1000) // a batch the indexer will never reach
	if _, err := s.Search(cctx, "common", SearchOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("search waiting on the index ignored its context: %v", err)
	}
	// So does a read waiting for badger.
	if _, err := s.Get(cctx, testKey("w1-40")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get waiting on badger ignored its context: %v", err)
	}
	s.ackedSeq.Add(^uint64(999))
}

// TestSearchFindsInflectionsAndQuestions: stemming lets a query find other
// forms of its words, and stop words neither match nor dilute.
func TestSearchFindsInflectionsAndQuestions(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	release := mkEntry("release", testBase, "release plan drafted")
	ship := mkEntry("ship", testBase+1, "ship friday")
	// Stop words only: a question's filler must not find this.
	filler := mkEntry("filler", testBase+2, "what did we do about it, and then what?")
	noise := mkEntry("noise", testBase+3, "lunch order for the team")
	if _, err := s.PutMany(context.Background(), itemsOf([]Entry{release, ship, filler, noise})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ q, want string }{
		{"releases", release.Key},
		{"shipping", ship.Key},
		{"what did we decide about the release?", release.Key},
		{"Melanie's drafts", release.Key}, // possessive stripped, "drafts" → "draft"
	} {
		got := searchKeys(t, s, c.q, SearchOptions{})
		if len(got) == 0 || got[0] != c.want {
			t.Errorf("Search(%q) = %v, want %s first", c.q, got, c.want)
		}
		if slices.Contains(got, filler.Key) {
			t.Errorf("Search(%q) found the stop-word-only record: %v", c.q, got)
		}
	}
}

// TestSearchFindsIrregularForms: a question's base form finds the past
// tense or participle a record is told in, and the other way round, while
// a form that is as often another word keeps its own term.
func TestSearchFindsIrregularForms(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	camp := mkEntry("camp", testBase, "we went camping at Zion with the children")
	concert := mkEntry("concert", testBase+1, "we saw Coldplay live last week")
	roses := mkEntry("roses", testBase+2, "I planted a rose out back")
	rise := mkEntry("rise", testBase+3, "prices rise every spring")
	if _, err := s.PutMany(context.Background(), itemsOf([]Entry{camp, concert, roses, rise})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ q, want string }{
		{"where did they go camping?", camp.Key},
		{"who has gone camping?", camp.Key},
		{"camping with a child", camp.Key},
		{"who did they see in concert?", concert.Key},
		{"have they seen Coldplay?", concert.Key},
		{"rose", roses.Key},
	} {
		got := searchKeys(t, s, c.q, SearchOptions{})
		if len(got) == 0 || got[0] != c.want {
			t.Errorf("Search(%q) = %v, want %s first", c.q, got, c.want)
		}
	}
	if got := searchKeys(t, s, "rose", SearchOptions{}); slices.Contains(got, rise.Key) {
		t.Errorf(`Search("rose") = %v: "rose" is taken for "rise"`, got)
	}
}

// TestRelevanceIsStable: Relevance lies in [0,1], agrees with Search's, does
// not depend on which other records matched, and falls as the query asks
// for more than the record holds.
// relevanceStore is a store of 30 filler records and two that match
// "garden tomatoes", both and half (with text half); es[0] is a filler.
func relevanceStore(t *testing.T, half string) (s *Store, es []Entry, both, halfE Entry) {
	t.Helper()
	s = openTest(t, t.TempDir())
	t.Cleanup(func() { s.Close() })
	for i := range 30 {
		es = append(es, mkEntry(fmt.Sprintf("f%d", i), testBase+int64(i), fmt.Sprintf("filler text number %d", i)))
	}
	both = mkEntry("both", testBase+100, "garden tomatoes ripening")
	halfE = mkEntry("half", testBase+101, half)
	es = append(es, both, halfE)
	if _, err := s.PutMany(context.Background(), itemsOf(es)); err != nil {
		t.Fatal(err)
	}
	return s, es, both, halfE
}

func TestRelevanceIsStable(t *testing.T) {
	ctx := context.Background()
	s, es, both, half := relevanceStore(t, "garden hose")
	hits, err := s.Search(ctx, "garden tomatoes", SearchOptions{})
	if err != nil || len(hits) != 2 {
		t.Fatalf("hits %+v, %v", hits, err)
	}
	rel, err := s.Relevance(ctx, "garden tomatoes", []string{both.Key, half.Key, es[0].Key, "cmb1-nosuch"}, SearchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rel) != 2 {
		t.Fatalf("relevance of non-matching keys reported: %v", rel)
	}
	for _, h := range hits {
		if h.Relevance <= 0 || h.Relevance > 1 || math.Abs(h.Relevance-rel[h.Key]) > 1e-12 {
			t.Fatalf("hit %s relevance %v, Relevance %v", h.Key, h.Relevance, rel[h.Key])
		}
	}
	if rel[both.Key] <= rel[half.Key] {
		t.Fatalf("record with both terms %v not above one with one %v", rel[both.Key], rel[half.Key])
	}
	// The limit (which hits come back) does not move the scale.
	one, _ := s.Search(ctx, "garden tomatoes", SearchOptions{Limit: 1})
	if len(one) != 1 || one[0].Relevance != hits[0].Relevance {
		t.Fatalf("limit 1 relevance %+v, full %+v", one, hits[0])
	}
	// A query word no record holds lowers every record's share.
	more, _ := s.Relevance(ctx, "garden tomatoes zucchini", []string{both.Key}, SearchOptions{})
	if more[both.Key] >= rel[both.Key] {
		t.Fatalf("an unmatched query word did not lower relevance: %v >= %v", more[both.Key], rel[both.Key])
	}
	// With MaxTerms, Relevance scores the terms Search scores.
	o := SearchOptions{MaxTerms: 1}
	few, err := s.Search(ctx, "garden tomatoes", o)
	if err != nil || len(few) == 0 {
		t.Fatalf("MaxTerms 1: hits %+v, %v", few, err)
	}
	frel, err := s.Relevance(ctx, "garden tomatoes", []string{both.Key, half.Key}, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range few {
		if math.Abs(h.Relevance-frel[h.Key]) > 1e-12 {
			t.Errorf("MaxTerms 1: hit %s relevance %v, Relevance %v", h.Key, h.Relevance, frel[h.Key])
		}
	}
	if frel[half.Key] != 0 {
		t.Errorf("MaxTerms 1: half, which holds only the commoner term, has relevance %v", frel[half.Key])
	}
}

// TestTermRelevance: each record's shares, term by term, sum to its
// Relevance; a term it lacks has share 0, a term found nowhere takes its
// place in the divisor, and keys matching no term are absent.
func TestTermRelevance(t *testing.T) {
	ctx := context.Background()
	s, es, both, half := relevanceStore(t, "tomatoes in a bowl")
	const q = "Gardens, tomatoes and zucchini: gardens!"
	keys := []string{both.Key, half.Key, es[0].Key, "cmb1-nosuch"}
	rel, err := s.Relevance(ctx, q, keys, SearchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	terms, shares, err := s.TermRelevance(ctx, q, keys, SearchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"garden", "tomato", "zucchini"}; !slices.Equal(terms, want) {
		t.Fatalf("terms %q, want %q", terms, want)
	}
	if len(shares) != 2 {
		t.Fatalf("shares of non-matching keys reported: %v", shares)
	}
	for _, k := range []string{both.Key, half.Key} {
		sh := shares[k]
		if len(sh) != len(terms) {
			t.Fatalf("%s: shares %v for terms %q", k, sh, terms)
		}
		sum := 0.0
		for _, x := range sh {
			sum += x
		}
		if math.Abs(sum-rel[k]) > 1e-12 {
			t.Errorf("%s: shares %v sum to %v, relevance %v", k, sh, sum, rel[k])
		}
		if sh[2] != 0 {
			t.Errorf("%s: share %v of a term found nowhere", k, sh[2])
		}
	}
	if sh := shares[half.Key]; sh[0] != 0 || sh[1] <= 0 {
		t.Errorf("half: shares %v, want none for garden, some for tomato", sh)
	}
	if sh := shares[both.Key]; sh[0] <= 0 || sh[1] <= 0 {
		t.Errorf("both: shares %v, want some for garden and tomato", sh)
	}
}

// TestUniq: uniq keeps each term's first occurrence, in order, for inputs
// from empty to larger than the tables it recycles.
func TestUniq(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 3))
	for trial := range 400 {
		n := rng.IntN(50)
		if trial%100 == 99 {
			n = 20000
		}
		vocab := 1 + rng.IntN(2*n+1)
		in := make([]string, n)
		for i := range in {
			in[i] = fmt.Sprintf("t%d", rng.IntN(vocab))
		}
		var want []string
		seen := map[string]bool{}
		for _, x := range in {
			if !seen[x] {
				seen[x] = true
				want = append(want, x)
			}
		}
		if got := uniq(slices.Clone(in)); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("trial %d: uniq(%d terms) = %d terms, want %d", trial, n, len(got), len(want))
		}
	}
}

// TestSearchReadsDeltaAsMerged checks that a search reading postings still
// in the delta finds exactly what it finds once they are merged: the same
// hits with bit-identical scores, for short and whole-record queries,
// MaxTerms, groups, field weights, AsOf, the tf table and pruning on or off.
// An index whose lists are many small blocks finds the same too, and gives
// the same relevance.
func TestSearchReadsDeltaAsMerged(t *testing.T) {
	unmerged, merged, blocked := newTextIndex(nil), newTextIndex(nil), newTextIndex(nil)
	blocked.terms.blockLen = 5
	var keys []string
	c, qc := newCorpus(21), newCorpus(22)
	var texts [][NumFields]string
	queries := 0
	for i := range 2500 {
		e := c.record(i, testBase+int64(i)*1000)
		if i%3 == 0 {
			e.Group = "other"
		}
		texts = append(texts, e.Texts)
		unmerged.addTexts(e.Key, e.CreatedAt, e.Group, e.Texts)
		keys = append(keys, e.Key)
		for _, x := range []*textIndex{merged, blocked} {
			x.addTexts(e.Key, e.CreatedAt, e.Group, e.Texts)
			x.mu.Lock()
			x.mergeLocked()
			x.mu.Unlock()
		}
		if i%25 != 24 {
			continue
		}
		if unmerged.delta.empty() {
			t.Fatalf("after record %d: nothing left in the delta to read", i)
		}
		for k := range 6 {
			queries++
			var q []string
			if k%2 == 0 {
				// A recent record's whole text, as admission searches it.
				all := texts[len(texts)-1-k]
				for _, f := range all {
					q = append(q, Tokenize(f)...)
				}
			} else {
				q = Tokenize(qc.words(1 + k))
			}
			q = uniq(unmerged.termer.terms(q))
			o := SearchOptions{Limit: 1 + (i+k)%12, RecencyWeight: float64(k%3) * 0.7, HalfLife: time.Hour}
			if k < 3 {
				o.MaxTerms = 8
			}
			if (i+k)%4 == 0 {
				o.Group = "other"
			}
			if (i+k)%5 == 0 {
				o.FieldWeights = [NumFields]float64{2, 0, 1, 1, 0.5, 1, 3}
			}
			normalizeSearch(&o)
			asOf, hide := testBase+int64(i)*1000, false
			if (i+k)%7 == 0 {
				asOf, hide = testBase+int64(i/2)*1000, true
			}
			for _, x := range []*textIndex{unmerged, merged, blocked} {
				x.tableMin = partTableMin
				if k%2 == 1 {
					x.tableMin = 0
				}
				x.exhaustive = (i/25)%2 == 1
			}
			got := unmerged.search(q, o, asOf, hide)
			want := merged.search(q, o, asOf, hide)
			if !slices.Equal(got, want) {
				t.Fatalf("record %d, query %d %+v:\nunmerged %+v\nmerged   %+v", i, k, o, got, want)
			}
			if b := blocked.search(q, o, asOf, hide); !slices.Equal(b, want) {
				t.Fatalf("record %d, query %d %+v:\nblocked %+v\nmerged  %+v", i, k, o, b, want)
			}
			// Recent records and a spread of older ones.
			some := slices.Clone(keys[max(0, len(keys)-20):])
			for j := k; j < len(keys); j += 37 {
				some = append(some, keys[j])
			}
			if b, m := blocked.relevance(q, some, o), merged.relevance(q, some, o); !maps.Equal(b, m) {
				t.Fatalf("record %d, query %d %+v: relevance blocked %v, merged %v", i, k, o, b, m)
			}
		}
	}
	if unmerged.delta.empty() || queries == 0 {
		t.Fatal("the delta was never read")
	}
}
