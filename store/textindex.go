package store

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// textIndex is the inverted index over the seven fields. It lives in memory
// and is rebuilt from the stored texts at Open: records are what must be
// durable, and a memory-resident index answers BM25 queries over 100k records
// in well under a millisecond per term, which posting keys in badger cannot.
type textIndex struct {
	mu       sync.RWMutex
	terms    termTable
	delta    delta // postings not yet in terms (textdelta.go)
	docs     []docInfo
	byKey    map[string]uint32
	groups   map[string]string // interned group names
	live     int
	totalLen [NumFields]int64

	// termer makes the terms of records and queries alike (tokenize.go).
	termer termer

	scratch sync.Pool // *scoreScratch
	// yield, if set, is called every few tens of µs of a merge, so that
	// the store's writers get a P in time (runtime.Gosched there; nil in
	// indexes nobody else waits on, and in benchmarks that pin a thread,
	// where a yield costs a thread hand-off).
	yield func()
	// exhaustive disables MaxScore pruning; tests compare both paths.
	exhaustive bool
	// tableMin is how many postings a query must have before BM25's tf
	// factor comes from a table (partTableMin; tests vary it).
	tableMin int
}

// A posting packs doc<<32 | field<<29 | tf<<17 | fieldLen. Carrying the
// field length in the posting lets BM25 score a posting without touching
// the document table, which is what makes long posting lists cheap.
//
// A list is its full blocks (termTable.full) followed by post, the block
// postings are appended to: a long list grows by a block at a time, so
// that adding postings never copies the ones already there, as growing
// one slice does (most of a merge's time once lists are long: each
// posting is copied about four times over the list's life, at Go's
// growth of a quarter, into memory fresh to the cache). A list's first
// block grows as a slice does up to blockLen postings; past it, blocks
// hold blockLen each (those a purge filtered, fewer).
type postingList struct {
	// What adding a posting touches comes first, within 52 bytes.
	post []uint64 // empty only in a free slot of termTable.lists
	df   [NumFields]int32
	// full is the index+1 in termTable.full of the list's full blocks,
	// 0 if it has none; it sits in what would be padding.
	full uint32
	term string
}

// termTable maps terms to their posting lists. It is a hash table with
// linear probing whose 8-byte slots hold a term's hash and the index of its
// list, and the lists are stored by value, so finding a term touches a slot,
// its list and the term's bytes, where a map[string]*postingList also reads
// a group's control word and follows a pointer to a list allocated on its
// own. A slot matches only if the term's bytes do, so terms never merge.
type termTable struct {
	slots []termSlot
	// lists come in chunks of listChunk, so that adding terms never copies
	// the lists already there (as growing one slice would, under the lock).
	lists  [][]postingList
	nlists int      // lists handed out, free ones included
	free   []uint32 // indices of lists freed by remove, for reuse
	n      int      // terms
	// full holds the full blocks of the lists that have some, in order
	// (postingList.full); freeFull, its entries freed for reuse.
	full     [][][]uint64
	freeFull []uint32
	// blockLen is a long list's block size in postings (0:
	// defaultBlockLen; tests make it small).
	blockLen int
}

const listChunk = 512

// defaultBlockLen is 16 KB of postings: copying a list of up to that many
// while it grows costs little, and a block's unused tail, at most one per
// list that has reached it (a few hundred lists in a store of 100k
// records), costs no more than the slack of slices grown by a quarter.
const defaultBlockLen = 2048

// blocks returns pl's full blocks, nil if it has none.
func (tt *termTable) blocks(pl *postingList) [][]uint64 {
	if pl.full == 0 {
		return nil
	}
	return tt.full[pl.full-1]
}

// setBlocks makes b pl's full blocks.
func (tt *termTable) setBlocks(pl *postingList, b [][]uint64) {
	switch {
	case pl.full != 0 && len(b) == 0:
		tt.full[pl.full-1] = nil
		tt.freeFull = append(tt.freeFull, pl.full)
		pl.full = 0
	case pl.full != 0:
		tt.full[pl.full-1] = b
	case len(b) == 0:
	case len(tt.freeFull) > 0:
		pl.full = tt.freeFull[len(tt.freeFull)-1]
		tt.freeFull = tt.freeFull[:len(tt.freeFull)-1]
		tt.full[pl.full-1] = b
	default:
		tt.full = append(tt.full, b)
		pl.full = uint32(len(tt.full))
	}
}

// appendPostings adds run, which comes after every posting of pl in
// document order, at the end of pl.
func (tt *termTable) appendPostings(pl *postingList, run []uint64) {
	for len(run) > 0 {
		room := cap(pl.post) - len(pl.post)
		switch {
		case room > 0:
			k := min(room, len(run))
			pl.post = append(pl.post, run[:k]...)
			run = run[k:]
		case pl.full == 0 && len(pl.post) < cmp.Or(tt.blockLen, defaultBlockLen):
			pl.post = append(pl.post, run...)
			run = nil
		default:
			tt.setBlocks(pl, append(tt.blocks(pl), pl.post))
			pl.post = make([]uint64, 0, cmp.Or(tt.blockLen, defaultBlockLen))
		}
	}
}

// appendSegs appends pl's blocks, full ones then post, to segs.
func (tt *termTable) appendSegs(segs [][]uint64, pl *postingList) [][]uint64 {
	return append(append(segs, tt.blocks(pl)...), pl.post)
}

// count is how many postings pl holds: a list holds one posting per
// document and field it counts, so the sum of its document frequencies,
// which spares a query reading the blocks of lists it does not score.
func (pl *postingList) count() int {
	n := 0
	for _, c := range pl.df {
		n += int(c)
	}
	return n
}

// list returns list l; inSlot, the list of slot i.
func (tt *termTable) list(l uint32) *postingList { return &tt.lists[l/listChunk][l%listChunk] }
func (tt *termTable) inSlot(i int) *postingList  { return tt.list(tt.slots[i].list - 1) }

type termSlot struct {
	hash uint32 // termHash of the term
	list uint32 // index in lists + 1; 0 marks an empty slot
}

// find returns the slot of term t (hash h, which must be termHash(t)) and
// whether t is there; if not, the slot is the empty one where t belongs.
func (tt *termTable) find(t string, h uint32) (int, bool) {
	if len(tt.slots) == 0 {
		return -1, false
	}
	mask := len(tt.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := tt.slots[i]
		if sl.list == 0 {
			return i, false
		}
		if sl.hash == h && tt.list(sl.list-1).term == t {
			return i, true
		}
	}
}

// get returns t's posting list, or nil.
func (tt *termTable) get(t string, h uint32) *postingList {
	if i, ok := tt.find(t, h); ok {
		return tt.inSlot(i)
	}
	return nil
}

// insert adds term t, which must not be there, with an empty list, and
// returns the list. Slot i is what find returned for it.
func (tt *termTable) insert(i int, t string, h uint32) *postingList {
	if 2*(tt.n+1) > len(tt.slots) {
		tt.grow()
		i, _ = tt.find(t, h)
	}
	var l uint32
	if k := len(tt.free); k > 0 {
		l = tt.free[k-1]
		tt.free = tt.free[:k-1]
	} else {
		if tt.nlists%listChunk == 0 {
			tt.lists = append(tt.lists, make([]postingList, listChunk))
		}
		l = uint32(tt.nlists)
		tt.nlists++
	}
	tt.slots[i] = termSlot{hash: h, list: l + 1}
	tt.n++
	pl := tt.list(l)
	pl.term = t
	return pl
}

func (tt *termTable) grow() {
	old := tt.slots
	tt.slots = make([]termSlot, max(2*len(old), 1024))
	mask := len(tt.slots) - 1
	for _, sl := range old {
		if sl.list == 0 {
			continue
		}
		i := int(sl.hash) & mask
		for tt.slots[i].list != 0 {
			i = (i + 1) & mask
		}
		tt.slots[i] = sl
	}
}

// delete removes the term in slot i and frees its list.
func (tt *termTable) delete(i int) {
	l := tt.slots[i].list - 1
	tt.setBlocks(tt.list(l), nil)
	*tt.list(l) = postingList{}
	tt.free = append(tt.free, l)
	tt.n--
	// Move back any later slot of the run that may now sit in i, so every
	// term stays reachable from its home slot without tombstones.
	mask := len(tt.slots) - 1
	for j := (i + 1) & mask; tt.slots[j].list != 0; j = (j + 1) & mask {
		home := int(tt.slots[j].hash) & mask
		// The slot may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			tt.slots[i] = tt.slots[j]
			i = j
		}
	}
	tt.slots[i] = termSlot{}
}

const (
	tfMax  = 1<<12 - 1
	lenMax = 1<<17 - 1
)

func packPosting(doc uint32, field uint8, tf, flen uint32) uint64 {
	return uint64(doc)<<32 | uint64(field)<<29 | uint64(min(tf, tfMax))<<17 | uint64(min(flen, lenMax))
}

func unpackPosting(p uint64) (doc uint32, field int, tf, flen uint32) {
	return uint32(p >> 32), int(p>>29) & 7, uint32(p>>17) & tfMax, uint32(p) & lenMax
}

type docInfo struct {
	key   string
	group string
	at    int64 // Store.orderAt: createdAt, or the arrival of a record dated far ahead
	lens  [NumFields]uint32
	alive bool
}

type scoreScratch struct {
	score   []float64
	touched []uint32
	live    []uint32
	cands   []uint32
	tab     partTable
	qs      []queryTerm // the query's terms, as queryTerms finds them
	order   []uint64    // queryTermsInto's ranks of terms by rarity
	kept    []uint64    // and the rarest
	lists   []termRef   // the ranked terms' lists
	refs    []termRef   // the query's terms' lists, in query order
	sink    uint64      // sums what refs loaded ahead; it means nothing
	tails   []uint64    // the query's terms' postings in the delta
	segs    [][]uint64  // the query's terms' blocks (queryTerm.segs)
	// idfs are idf(df) for df < len(idfs) as one query computes them
	// (0 until then): a query of a record's text has a few hundred terms
	// in up to seven fields each, and most of their document frequencies
	// are a few small numbers.
	idfs [256]float64
}

// partTable holds BM25's term-frequency factor for tf < partTF and field
// length < partLen, per field; queries over long lists fill it once.
const (
	partTF       = 8
	partLen      = 64
	partTableMin = 20000 // postings in a query before the table pays off
)

type partTable [NumFields][partTF][partLen]float64

func (x *textIndex) partTab(sc *scoreScratch, part func(f int, tf, fl uint32) float64) *partTable {
	t := &sc.tab
	for f := range t {
		for tf := range t[f] {
			for fl := range t[f][tf] {
				t[f][tf][fl] = part(f, uint32(tf), uint32(fl))
			}
		}
	}
	return t
}

func newTextIndex(yield func()) *textIndex {
	return &textIndex{
		yield:    yield,
		byKey:    map[string]uint32{},
		groups:   map[string]string{},
		tableMin: partTableMin,
	}
}

func (x *textIndex) termCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.mergeLocked()
	return x.terms.n
}

func (x *textIndex) add(key string, at int64, group string, d docTerms) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.addLocked(key, at, group, d)
}

func (x *textIndex) addLocked(key string, at int64, group string, d docTerms) {
	if id, ok := x.byKey[key]; ok && x.docs[id].alive {
		return
	}
	id := uint32(len(x.docs))
	x.addDocLocked(key, at, group, d.lens)
	for i := range d.terms {
		ft := &d.terms[i]
		x.delta.add(ft.term, ft.hash, packPosting(id, ft.field, uint32(ft.tf), d.lens[ft.field]))
	}
	if len(x.delta.lids) >= deltaMax {
		x.mergeLocked()
	}
}

// addDocLocked appends a document whose postings are in the delta or
// about to be.
func (x *textIndex) addDocLocked(key string, at int64, group string, lens [NumFields]uint32) {
	g, ok := x.groups[group]
	if !ok {
		x.groups[group] = group
		g = group
	}
	id := uint32(len(x.docs))
	x.docs = append(x.docs, docInfo{key: key, group: g, at: at, lens: lens, alive: true})
	x.byKey[key] = id
	x.live++
	for f, l := range lens {
		x.totalLen[f] += int64(l)
	}
}

// remove drops documents; terms lists, per document, the terms it was
// indexed under (recomputed from its stored texts).
func (x *textIndex) remove(keys []string, terms []docTerms) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.mergeLocked()
	dead := map[uint32]struct{}{}
	affected := map[string]uint32{} // term → hash
	for i, k := range keys {
		id, ok := x.byKey[k]
		if !ok || !x.docs[id].alive {
			continue
		}
		d := &x.docs[id]
		d.alive = false
		x.live--
		for f, l := range d.lens {
			x.totalLen[f] -= int64(l)
		}
		delete(x.byKey, k)
		dead[id] = struct{}{}
		for _, ft := range terms[i].terms {
			affected[ft.term] = ft.hash
		}
	}
	for t, h := range affected {
		j, ok := x.terms.find(t, h)
		if !ok {
			continue
		}
		pl := x.terms.inSlot(j)
		filter := func(post []uint64) []uint64 {
			kept := post[:0]
			for _, p := range post {
				if _, gone := dead[uint32(p>>32)]; gone {
					pl.df[(p>>29)&7]--
					continue
				}
				kept = append(kept, p)
			}
			return kept
		}
		// Each block filtered in place, the emptied ones dropped; an
		// emptied post takes the last full block's place.
		full := x.terms.blocks(pl)
		keptFull := full[:0]
		for _, b := range full {
			if b = filter(b); len(b) > 0 {
				keptFull = append(keptFull, b)
			}
		}
		clear(full[len(keptFull):])
		pl.post = filter(pl.post)
		if n := len(keptFull); len(pl.post) == 0 && n > 0 {
			pl.post, keptFull = keptFull[n-1], keptFull[:n-1]
		}
		x.terms.setBlocks(pl, keptFull)
		if len(pl.post) == 0 {
			x.terms.delete(j)
		}
	}
	// Dead doc slots stay (ids are positions); compact when they dominate so
	// a long-running node that purges does not grow without bound.
	if len(x.docs) > 1024 && x.live < len(x.docs)/2 {
		x.compactLocked()
	}
}

func (x *textIndex) compactLocked() {
	remap := make([]uint32, len(x.docs))
	docs := make([]docInfo, 0, x.live)
	for i, d := range x.docs {
		if d.alive {
			remap[i] = uint32(len(docs))
			x.byKey[d.key] = uint32(len(docs))
			docs = append(docs, d)
		}
	}
	renumber := func(post []uint64) {
		for i, p := range post {
			post[i] = uint64(remap[p>>32])<<32 | p&(1<<32-1)
		}
	}
	for _, chunk := range x.terms.lists {
		for l := range chunk {
			renumber(chunk[l].post)
		}
	}
	for _, full := range x.terms.full {
		for _, b := range full {
			renumber(b)
		}
	}
	x.docs = docs
	x.scratch = sync.Pool{}
}

// SearchOptions tunes Search. The zero value ranks by text alone with equal
// field weights.
type SearchOptions struct {
	Limit int // default 10
	// FieldWeights scale each field's BM25 score (FieldNames order). All
	// zero means all 1; a zero weight among others excludes that field.
	FieldWeights [NumFields]float64
	// RecencyWeight adds RecencyWeight·2^(−age/HalfLife) to every hit, age
	// measured from AsOf to the record's time (Hit.CreatedAt).
	RecencyWeight float64
	HalfLife      time.Duration // default 7 days
	// Group restricts hits to one group ("" = any).
	Group string
	// AsOf hides records whose time (Hit.CreatedAt) is after it and anchors
	// recency (zero = now).
	AsOf time.Time
	// K1 and B are the BM25 parameters (defaults 1.2 and 0.75).
	K1, B float64
	// MaxTerms, when positive, scores only the query's MaxTerms rarest
	// terms (those in the fewest postings): a long query, such as a whole
	// record's text, costs a pass over the common terms' lists, which hold
	// most of the store, for evidence its rare terms already give. Hit's
	// Relevance keeps its scale (it still divides by all the terms).
	MaxTerms int
}

// Hit is one search result.
type Hit struct {
	Key string
	// CreatedAt is the record's time, as in KeyTime: its createdAt, or its
	// arrival if it is dated more than Options.MaxClockSkew after it.
	CreatedAt int64
	Group     string
	Score     float64 // Text + Recency
	Text      float64 // BM25, summed over the fields
	Recency   float64
	// Relevance is Text on a fixed scale, in [0,1]: Text divided by the
	// most the query's terms could score, each at BM25's saturation (its
	// idf × (k1+1)) in its best-weighted field, capped at 1. Terms found
	// in no record count with the idf of a term found once, so 0.5 means
	// about half the query's idf-weighted evidence is in the record,
	// whatever else matched. It depends on the query and the store's
	// statistics, not on the other hits: a threshold means the same from
	// one query to the next.
	Relevance float64
}

// Search ranks records against query with per-field BM25 plus recency.
func (s *Store) Search(ctx context.Context, query string, o SearchOptions) ([]Hit, error) {
	if err := s.searchable(ctx); err != nil {
		return nil, err
	}
	return s.searchTerms(ctx, s.idx.termer.terms(Tokenize(query)), o)
}

// searchable refuses a search of a closed store or a done context.
func (s *Store) searchable(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// searchTerms is Search of the query's terms, repeats included.
func (s *Store) searchTerms(ctx context.Context, qterms []string, o SearchOptions) ([]Hit, error) {
	normalizeSearch(&o)
	asOf := o.AsOf
	if asOf.IsZero() {
		asOf = s.opts.Now()
	}
	qterms = uniq(qterms)
	if len(qterms) == 0 {
		return nil, nil
	}
	// Every write acknowledged before this search must be findable.
	if err := s.waitIndexed(ctx); err != nil {
		return nil, err
	}
	return s.idx.search(qterms, o, asOf.UnixMilli(), !o.AsOf.IsZero()), nil
}

// normalizeSearch gives o's unset settings their defaults.
func normalizeSearch(o *SearchOptions) {
	opt.Default(&o.Limit, 10)
	if o.FieldWeights == ([NumFields]float64{}) {
		for i := range o.FieldWeights {
			o.FieldWeights[i] = 1
		}
	}
	for i, w := range o.FieldWeights {
		// A negative weight would let scores cancel to zero, which the scorer
		// uses to mean "not yet touched".
		if w < 0 || math.IsNaN(w) {
			o.FieldWeights[i] = 0
		}
	}
	opt.Default(&o.HalfLife, 7*24*time.Hour)
	opt.Default(&o.K1, 1.2)
	if o.B <= 0 || o.B > 1 {
		o.B = 0.75
	}
}

// Relevance is Hit.Relevance of each of keys for query, as Search with o
// would compute it (o's Limit, recency and AsOf do not matter); keys not
// indexed, or matching no term, are absent. It serves rankers that
// weigh records Search did not return, such as a hit's lineage neighbours.
func (s *Store) Relevance(ctx context.Context, query string, keys []string, o SearchOptions) (map[string]float64, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	normalizeSearch(&o)
	qterms := uniq(s.idx.termer.terms(Tokenize(query)))
	if len(qterms) == 0 || len(keys) == 0 {
		return map[string]float64{}, nil
	}
	if err := s.waitIndexed(ctx); err != nil {
		return nil, err
	}
	return s.idx.relevance(qterms, keys, o), nil
}

// TermRelevance is Relevance split by query term: for each of keys, the
// share of the query's attainable score (Hit.Relevance's divisor) that
// each of the query's distinct terms contributes, indexed as terms, which
// it returns. A record's shares sum to its Relevance before the cap at 1.
// Keys not indexed, or matching no term, are absent. It serves rankers
// that compare what two records hold of one query term by term, such as
// what a neighbour adds to a record.
func (s *Store) TermRelevance(ctx context.Context, query string, keys []string, o SearchOptions) (terms []string, shares map[string][]float64, err error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	normalizeSearch(&o)
	terms = uniq(s.idx.termer.terms(Tokenize(query)))
	if len(terms) == 0 || len(keys) == 0 {
		return terms, map[string][]float64{}, nil
	}
	if err := s.waitIndexed(ctx); err != nil {
		return nil, nil, err
	}
	return terms, s.idx.termRelevance(terms, keys, o), nil
}

// uniq drops repeated terms in place, keeping each one's first occurrence
// in order.
func uniq(in []string) []string {
	if len(in) < 2 {
		return in
	}
	// An open-addressing set of the terms kept, at most half full: each
	// slot holds a term's hash and its index in out, plus one (0 is empty).
	size := 1 << bits.Len(uint(2*len(in)-1))
	p, _ := uniqSets.Get().(*[]uint64)
	if p == nil || len(*p) < size {
		b := make([]uint64, size)
		p = &b
	}
	slots, mask := (*p)[:size], uint32(size-1)
	out := in[:0] // never past the term being read
	for _, t := range in {
		h := termHash(t)
		for i := h & mask; ; i = (i + 1) & mask {
			s := slots[i]
			if s == 0 {
				out = append(out, t)
				slots[i] = uint64(h)<<32 | uint64(len(out))
				break
			}
			if uint32(s>>32) == h && out[uint32(s)-1] == t {
				break
			}
		}
	}
	clear(slots)
	if len(*p) <= 1<<14 {
		uniqSets.Put(p)
	}
	return out
}

// uniqSets recycles uniq's tables: a query of a whole record's text has a
// few hundred terms, and a map for them was most of a search's allocation.
var uniqSets sync.Pool

// search runs a search under the read lock, the delta unmerged.
func (x *textIndex) search(qterms []string, o SearchOptions, asOfMs int64, hideLater bool) []Hit {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.searchLocked(qterms, o, asOfMs, hideLater)
}

// readMerged runs fn under the index's lock with the delta merged.
// Postings still in the delta go to the index first. Searches share the
// index; should the indexer keep adding between a merge and the read
// lock, fn runs under the write lock rather than wait on.
func (x *textIndex) readMerged(fn func()) {
	x.mu.RLock()
	for try := 0; !x.delta.empty(); try++ {
		x.mu.RUnlock()
		x.mu.Lock()
		x.mergeLocked()
		if try == 1 {
			defer x.mu.Unlock()
			fn()
			return
		}
		x.mu.Unlock()
		x.mu.RLock()
	}
	defer x.mu.RUnlock()
	fn()
}

// queryTerm is one query term's posting list and weights.
type queryTerm struct {
	// segs are the term's list in the index, block by block, and then
	// its postings in the delta: one after the other, the list a merge
	// would make. n is how many postings they hold.
	segs [][]uint64
	n    int
	wi   [NumFields]float64 // field weight × idf
	ub   float64            // most one document can gain from this term
}

// termRef is a term's entries in the index and the delta, either nil.
type termRef struct {
	pl *postingList
	de *deltaTerm
}

// refs looks qterms up in the index and the delta, into sc.refs. A
// group at a time, their slots and entries in both are loaded first, so that
// the cache misses of a group's lookups overlap: a query of a record's
// text looks up a hundred terms or more, one after another, each waiting
// for its slot, then its list, then its term's bytes.
func (x *textIndex) refs(sc *scoreScratch, qterms []string) []termRef {
	refs := sc.refs[:0]
	var hs [mergeGroup]uint32
	for i := 0; i < len(qterms); i += mergeGroup {
		g := qterms[i:min(i+mergeGroup, len(qterms))]
		for k, t := range g {
			hs[k] = termHash(t)
		}
		sc.sink += x.terms.touch(hs[:len(g)], false) + x.delta.touch(hs[:len(g)])
		for k, t := range g {
			refs = append(refs, termRef{x.terms.get(t, hs[k]), x.delta.lookup(t, hs[k])})
		}
	}
	sc.refs = refs
	return refs
}

// stats are the term's document frequencies by field and its postings,
// over the index and the delta.
func (r termRef) stats() (df [NumFields]int32, n int) {
	if r.pl != nil {
		df, n = r.pl.df, r.pl.count()
	}
	if r.de != nil {
		for f, c := range r.de.df {
			df[f] += int32(c)
			n += int(c)
		}
	}
	return df, n
}

// queryTerms looks up the query's terms and returns those found, and the
// most the query could score (the divisor of Hit.Relevance). The caller
// holds the lock.
func (x *textIndex) queryTerms(qterms []string, o SearchOptions) (qs []queryTerm, attainable float64) {
	return x.queryTermsInto(&scoreScratch{qs: make([]queryTerm, 0, len(qterms))}, qterms, o)
}

// queryTermsInto is queryTerms in sc's buffers: it appends to sc.qs (which
// it may reorder), and the terms' postings in the delta to sc.tails.
func (x *textIndex) queryTermsInto(sc *scoreScratch, qterms []string, o SearchOptions) (qs []queryTerm, attainable float64) {
	qs = sc.qs[:0]
	// term is a found term's queryTerm, its weights not yet set.
	term := func(r termRef) queryTerm {
		q := queryTerm{}
		s := len(sc.segs)
		if r.pl != nil {
			sc.segs = x.terms.appendSegs(sc.segs, r.pl)
			q.n = r.pl.count()
		}
		if r.de != nil {
			n := len(sc.tails)
			sc.tails = x.delta.appendPosts(sc.tails, r.de)
			sc.segs = append(sc.segs, sc.tails[n:len(sc.tails):len(sc.tails)])
			q.n += len(sc.tails) - n
		}
		q.segs = sc.segs[s:len(sc.segs):len(sc.segs)]
		return q
	}
	n := float64(x.live)
	k1 := o.K1
	maxW := 0.0
	for _, w := range o.FieldWeights {
		maxW = max(maxW, w)
	}
	idfOf := func(df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }
	memo := &sc.idfs
	clear(memo[:])
	idf := func(df float64) float64 {
		if df >= float64(len(memo)) {
			return idfOf(df)
		}
		// idf is positive (its argument exceeds 1), so 0 marks "not yet".
		v := &memo[int(df)]
		if *v == 0 {
			*v = idfOf(df)
		}
		return *v
	}
	// weigh sets q's weights from the term's document frequencies and
	// returns its best field's weight.
	weigh := func(q *queryTerm, df *[NumFields]int32) (best float64) {
		for f := range q.wi {
			if df[f] == 0 {
				continue
			}
			q.wi[f] = o.FieldWeights[f] * idf(float64(df[f]))
			q.ub += q.wi[f] * (k1 + 1)
			best = max(best, q.wi[f])
		}
		return best
	}
	if o.MaxTerms <= 0 || len(qterms) <= o.MaxTerms {
		for _, r := range x.refs(sc, qterms) {
			if r.pl == nil && r.de == nil {
				// Found nowhere: as rare as a term found once.
				attainable += maxW * idf(1) * (k1 + 1)
				continue
			}
			df, _ := r.stats()
			var q queryTerm
			if attainable += weigh(&q, &df) * (k1 + 1); q.ub > 0 {
				// Its postings only now: a term no weighted field
				// holds is not scored.
				qs = append(qs, term(r))
				qs[len(qs)-1].wi, qs[len(qs)-1].ub = q.wi, q.ub
			}
		}
		clear(sc.refs) // they point into the term table
		return qs, attainable
	}
	// Only the MaxTerms rarest are scored, so only they need their
	// weights; every term needs its best field's weight for attainable.
	// With the positive field weights all equal, that is the weight in its
	// field of fewest documents (idf falls as df grows), one idf instead
	// of one per field.
	uniform := true
	for _, w := range o.FieldWeights {
		uniform = uniform && (w == 0 || w == maxW)
	}
	lists, order := sc.lists[:0], sc.order[:0]
	for _, r := range x.refs(sc, qterms) {
		if r.pl == nil && r.de == nil {
			attainable += maxW * idf(1) * (k1 + 1)
			continue
		}
		dfs, n := r.stats()
		var best float64
		if uniform {
			var fewest int32
			for f, df := range dfs {
				if df != 0 && o.FieldWeights[f] != 0 && (fewest == 0 || df < fewest) {
					fewest = df
				}
			}
			if fewest == 0 {
				continue // in no weighted field: never scored
			}
			best = maxW * idf(float64(fewest))
		} else {
			var q queryTerm
			if best = weigh(&q, &dfs); q.ub == 0 {
				continue
			}
		}
		attainable += best * (k1 + 1)
		// The rarest, ties in query order: ranked by (posting count,
		// position) pairs.
		order = append(order, uint64(n)<<32|uint64(len(lists)))
		lists = append(lists, r)
	}
	if len(order) > o.MaxTerms {
		// The MaxTerms least of order, ascending: few pairs ever enter.
		sel := sc.kept[:0]
		for _, r := range order {
			if len(sel) == o.MaxTerms && r >= sel[len(sel)-1] {
				continue
			}
			if len(sel) < o.MaxTerms {
				sel = append(sel, r)
			} else {
				sel[len(sel)-1] = r
			}
			for i := len(sel) - 1; i > 0 && sel[i] < sel[i-1]; i-- {
				sel[i], sel[i-1] = sel[i-1], sel[i]
			}
		}
		order, sc.kept = append(order[:0], sel...), sel[:0]
	}
	for _, k := range order {
		r := lists[uint32(k)]
		q := term(r)
		df, _ := r.stats()
		weigh(&q, &df)
		qs = append(qs, q)
	}
	clear(lists) // they point into the term table
	clear(sc.refs)
	sc.lists, sc.order, sc.refs = lists[:0], order[:0], sc.refs[:0]
	return qs, attainable
}

// bm25Part is BM25's term-frequency factor of one posting; score = wi·part.
func bm25Part(k1, b, norm float64, tf, fl uint32) float64 {
	t := float64(tf)
	return t * (k1 + 1) / (t + k1*(1-b) + norm*float64(fl))
}

// lengthNorms are BM25's per-field length factors, k1·b/avgdl. The caller
// holds the lock.
func (x *textIndex) lengthNorms(o SearchOptions) (norm [NumFields]float64) {
	n := float64(x.live)
	for f := range norm {
		avg := cmp.Or(float64(x.totalLen[f])/n, 1)
		norm[f] = o.K1 * o.B / avg
	}
	return norm
}

// docScore is q's BM25 score in document id, found by binary search of
// its postings; norm is lengthNorms(o).
func (q *queryTerm) docScore(id uint32, o SearchOptions, norm *[NumFields]float64) float64 {
	var score float64
	for _, post := range q.segs {
		// Blocks follow each other in document order, and a document's
		// postings may end one block and start the next.
		if len(post) == 0 || uint32(post[len(post)-1]>>32) < id {
			continue
		}
		if uint32(post[0]>>32) > id {
			break
		}
		j, _ := slices.BinarySearchFunc(post, id, func(p uint64, id uint32) int {
			return cmp.Compare(uint32(p>>32), id)
		})
		for ; j < len(post) && uint32(post[j]>>32) == id; j++ {
			p := post[j]
			if f := (p >> 29) & 7; q.wi[f] != 0 {
				score += q.wi[f] * bm25Part(o.K1, o.B, norm[f], uint32(p>>17)&tfMax, uint32(p)&lenMax)
			}
		}
	}
	return score
}

// relevance is Store.Relevance over the index.
func (x *textIndex) relevance(qterms []string, keys []string, o SearchOptions) map[string]float64 {
	out := make(map[string]float64, len(keys))
	x.termScores(qterms, keys, o, func(k string, _ int, share float64) { out[k] += share })
	for k, r := range out {
		out[k] = min(r, 1)
	}
	return out
}

// termRelevance is Store.TermRelevance over the index.
func (x *textIndex) termRelevance(qterms []string, keys []string, o SearchOptions) map[string][]float64 {
	out := make(map[string][]float64, len(keys))
	x.termScores(qterms, keys, o, func(k string, i int, share float64) {
		if out[k] == nil {
			out[k] = make([]float64, len(qterms))
		}
		out[k][i] = share
	})
	return out
}

// termScores calls fn for each live record of keys and each term of
// qterms (by index) that it holds, with the term's BM25 score in it as a
// share of what the query could score (Hit.Relevance's divisor).
func (x *textIndex) termScores(qterms []string, keys []string, o SearchOptions, fn func(key string, term int, share float64)) {
	x.readMerged(func() {
		if x.live == 0 {
			return
		}
		// Term by term, so that qs[i] is qterms[i] (queryTerms leaves out
		// terms found nowhere); the divisor is the whole query's.
		qs := make([]queryTerm, len(qterms))
		var attainable float64
		var sc scoreScratch
		for i, t := range qterms {
			sc.qs = qs[i : i : i+1]
			_, a := x.queryTermsInto(&sc, []string{t}, o)
			attainable += a
		}
		if attainable == 0 {
			return
		}
		if o.MaxTerms > 0 {
			// As queryTerms does: only the MaxTerms rarest terms found
			// score, ties in query order.
			var found []int
			for i := range qs {
				if qs[i].ub > 0 {
					found = append(found, i)
				}
			}
			slices.SortStableFunc(found, func(a, b int) int { return cmp.Compare(qs[a].n, qs[b].n) })
			for _, i := range found[min(o.MaxTerms, len(found)):] {
				qs[i] = queryTerm{}
			}
		}
		norm := x.lengthNorms(o)
		for _, k := range keys {
			id, ok := x.byKey[k]
			if !ok || !x.docs[id].alive {
				continue
			}
			for i := range qs {
				if score := qs[i].docScore(id, o, &norm); score > 0 {
					fn(k, i, score/attainable)
				}
			}
		}
	})
}

// searchLocked runs a search; the caller holds the lock.
func (x *textIndex) searchLocked(qterms []string, o SearchOptions, asOfMs int64, hideLater bool) []Hit {
	if x.live == 0 {
		return nil
	}
	sc, _ := x.scratch.Get().(*scoreScratch)
	if sc == nil || len(sc.score) < len(x.docs) {
		sc = &scoreScratch{score: make([]float64, len(x.docs)+len(x.docs)/4+64)}
	}
	defer func() {
		for _, d := range sc.touched {
			sc.score[d] = 0
		}
		sc.touched = sc.touched[:0]
		x.scratch.Put(sc)
	}()

	var gname string
	filterGroup := o.Group != ""
	if filterGroup {
		g, ok := x.groups[o.Group]
		if !ok {
			return nil
		}
		gname = g
		// Groups are only ever added: if this is the one group ever
		// indexed, every document is in it.
		filterGroup = len(x.groups) > 1
	}
	k1, b := o.K1, o.B
	rw := max(o.RecencyWeight, 0)
	halfLifeMs := float64(o.HalfLife.Milliseconds())
	recency := func(id uint32) float64 {
		if o.RecencyWeight == 0 {
			return 0
		}
		age := float64(max(asOfMs-x.docs[id].at, 0))
		return o.RecencyWeight * math.Exp2(-age/halfLifeMs)
	}
	accept := func(id uint32) bool {
		if !filterGroup && !hideLater {
			return true
		}
		d := &x.docs[id]
		return (!filterGroup || d.group == gname) && (!hideLater || d.at <= asOfMs)
	}

	// MaxScore: score the rarest terms over their whole posting lists; once
	// the terms left cannot lift a document that matched none so far past
	// the current k-th best, they only add to documents already found,
	// which costs a galloping search per candidate instead of a pass over
	// a list that may hold most of the corpus.
	norm := x.lengthNorms(o)
	// part is BM25's term-frequency factor of one posting; score = wi·part.
	// Long lists read it from a per-query table for the common small tf and
	// field lengths instead of dividing for every posting.
	part := func(f int, tf, fl uint32) float64 { return bm25Part(k1, b, norm[f], tf, fl) }
	sc.tails, sc.segs = sc.tails[:0], sc.segs[:0]
	qs, attainable := x.queryTermsInto(sc, qterms, o)
	defer func() {
		clear(qs[:cap(qs)]) // they hold posting lists
		sc.qs = qs[:0]
		clear(sc.segs)
		sc.segs = sc.segs[:0]
	}()
	// By bound, highest first. slices.SortFunc runs the same pdqsort as
	// sort.Slice did (both are generated from one template), so terms of
	// equal bound stay in the order they had and scores add up the same;
	// it only spares sort.Slice's reflection (its swapper moves 88-byte
	// terms through typedmemmove).
	slices.SortFunc(qs, func(a, b queryTerm) int { return cmp.Compare(b.ub, a.ub) })
	rest := make([]float64, len(qs)+1)
	for i := len(qs) - 1; i >= 0; i-- {
		rest[i] = rest[i+1] + qs[i].ub
	}
	var tab *partTable
	total := 0
	for i := range qs {
		total += qs[i].n
	}
	if total >= x.tableMin {
		tab = x.partTab(sc, part)
	}
	i := 0
	var kth float64
	// kthAt is the term before which kth was last computed: since then no
	// document gained more than rest[kthAt]-rest[i], so neither did the
	// k-th best, and kth is not worth computing again until that bound
	// could let the loop stop.
	kthAt := 0
	for ; i < len(qs); i++ {
		// The k-th best text score so far bounds the final k-th best from
		// below (recency only adds), so comparing with it is safe.
		if !x.exhaustive && i > 0 && len(sc.touched) >= o.Limit && rest[i]+rw < kth+rest[kthAt]-rest[i] {
			kth, kthAt = x.kth(sc.score, sc.touched, o.Limit), i
			if rest[i]+rw < kth {
				break
			}
		}
		// The hot loop: written out so nothing here is a closure call.
		q := &qs[i]
		wi, scores, touched := q.wi, sc.score, sc.touched
		filter := filterGroup || hideLater
		for _, post := range q.segs {
			for _, p := range post {
				id := uint32(p >> 32)
				f := (p >> 29) & 7
				w := wi[f]
				if w == 0 || (filter && !accept(id)) {
					continue
				}
				if scores[id] == 0 {
					touched = append(touched, id)
				}
				tf, fl := uint32(p>>17)&tfMax, uint32(p)&lenMax
				if tab != nil && tf < partTF && fl < partLen {
					scores[id] += w * tab[f][tf][fl]
				} else {
					scores[id] += w * part(int(f), tf, fl)
				}
			}
		}
		sc.touched = touched
	}
	cands := sc.touched
	if i < len(qs) {
		// The remaining terms only add to documents already found. A
		// candidate that cannot reach the k-th best even with every
		// remaining term at its maximum (and full recency) is out for
		// good; the survivors are usually few enough to look up by
		// binary search instead of passing over the long lists.
		live := sc.live[:0]
		sorted := false
		for ; i < len(qs); i++ {
			live = live[:0]
			for _, id := range cands {
				if sc.score[id]+rest[i]+rw >= kth {
					live = append(live, id)
				}
			}
			cands = live
			q := &qs[i]
			if len(cands)*16 > q.n {
				// Too many candidates for searching to beat one pass.
				for _, post := range q.segs {
					for _, p := range post {
						id := uint32(p >> 32)
						f := (p >> 29) & 7
						if sc.score[id] != 0 && q.wi[f] != 0 {
							sc.score[id] += q.wi[f] * part(int(f), uint32(p>>17)&tfMax, uint32(p)&lenMax)
						}
					}
				}
			} else {
				if !sorted {
					slices.Sort(cands)
					sorted = true
				}
				// Each block adds what it has of the candidates in its
				// range of documents; a document whose postings end one
				// block and start the next gets them in list order, as
				// from one pass.
				for _, post := range q.segs {
					if len(post) == 0 {
						continue
					}
					c, _ := slices.BinarySearch(cands, uint32(post[0]>>32))
					last := uint32(post[len(post)-1] >> 32)
					for _, id := range cands[c:] {
						if id > last {
							break
						}
						// First posting of doc id at or after the current position.
						k, _ := slices.BinarySearchFunc(post, id, func(p uint64, id uint32) int {
							return cmp.Compare(uint32(p>>32), id)
						})
						post = post[k:]
						for len(post) > 0 && uint32(post[0]>>32) == id {
							p := post[0]
							if f := (p >> 29) & 7; q.wi[f] != 0 {
								sc.score[id] += q.wi[f] * part(int(f), uint32(p>>17)&tfMax, uint32(p)&lenMax)
							}
							post = post[1:]
						}
					}
				}
			}
			if len(cands) >= o.Limit {
				kth = max(kth, x.kth(sc.score, cands, o.Limit))
			}
			// Copy the survivors out of live: the next filter rewrites it.
			sc.cands = append(sc.cands[:0], cands...)
			cands = sc.cands
		}
		sc.live = live
	}

	// At least Limit candidates score kth or more, so one whose text with
	// the largest possible recency falls short of it is not among the hits:
	// only the few that reach it are read from the document table and
	// ranked (a table read each is most of this loop's cost otherwise).
	if len(cands) > o.Limit {
		kth = max(kth, x.kth(sc.score, cands, o.Limit))
	}
	h := make(hitHeap, 0, min(o.Limit, len(cands)))
	for _, id := range cands {
		// A document that cannot beat the worst kept hit even with the
		// largest possible recency is skipped before paying for exp2.
		if sc.score[id]+rw < kth || len(h) == o.Limit && sc.score[id]+rw < h[0].Score {
			continue
		}
		d := &x.docs[id]
		hit := Hit{Key: d.key, CreatedAt: d.at, Group: d.group, Text: sc.score[id], Recency: recency(id)}
		hit.Score = hit.Text + hit.Recency
		hit.Relevance = min(hit.Text/attainable, 1)
		if len(h) < o.Limit {
			// heap.Push without boxing the hit: Fix of the new last
			// element only sifts it up.
			h = append(h, hit)
			heap.Fix(&h, len(h)-1)
		} else if better(hit, h[0]) {
			h[0] = hit
			heap.Fix(&h, 0)
		}
	}
	out := []Hit(h)
	slices.SortFunc(out, func(a, b Hit) int { // better is a total order
		switch {
		case better(a, b):
			return -1
		case better(b, a):
			return 1
		}
		return 0
	})
	return out
}

// kth is the k-th best text score among ids; only ever called with at
// least k of them. The heap is written out: container/heap would box
// every score it is handed, one allocation per candidate.
func (x *textIndex) kth(score []float64, ids []uint32, k int) float64 {
	var small [64]float64 // the usual k, off the heap
	h := small[:0]
	if k > len(small) {
		h = make([]float64, 0, k)
	}
	for _, id := range ids {
		v := score[id]
		if len(h) < k {
			h = append(h, v)
			for c := len(h) - 1; c > 0; {
				p := (c - 1) / 2
				if h[p] <= h[c] {
					break
				}
				h[p], h[c] = h[c], h[p]
				c = p
			}
		} else if v > h[0] {
			h[0] = v
			for p := 0; ; {
				c := 2*p + 1
				if c >= len(h) {
					break
				}
				if c+1 < len(h) && h[c+1] < h[c] {
					c++
				}
				if h[p] <= h[c] {
					break
				}
				h[p], h[c] = h[c], h[p]
				p = c
			}
		}
	}
	return h[0]
}

// better orders hits by score, then newer first, then key, so equal scores
// rank the same way on every node.
func better(a, b Hit) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	if a.CreatedAt != b.CreatedAt {
		return a.CreatedAt > b.CreatedAt
	}
	return a.Key < b.Key
}

// hitHeap is a min-heap on rank: the root is the worst hit kept so far.
type hitHeap []Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(v any)        { *h = append(*h, v.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// snapshot renders the index as comparable text facts, for Check. The
// caller holds the write lock.
func (x *textIndex) snapshot() (docs map[string]string, postings map[string]map[string]struct{}) {
	x.mergeLocked()
	docs = map[string]string{}
	for _, d := range x.docs {
		if d.alive {
			docs[d.key] = fmt.Sprintf("t=%d g=%q lens=%v", d.at, d.group, d.lens)
		}
	}
	postings = map[string]map[string]struct{}{}
	for _, chunk := range x.terms.lists {
		for l := range chunk {
			if pl := &chunk[l]; len(pl.post) > 0 {
				postings[pl.term] = x.snapshotList(pl)
			}
		}
	}
	return docs, postings
}

// snapshotList renders one term's postings, and any disagreement with its
// document frequencies.
func (x *textIndex) snapshotList(pl *postingList) map[string]struct{} {
	set := make(map[string]struct{}, pl.count())
	var df [NumFields]int32
	for _, post := range x.terms.appendSegs(nil, pl) {
		for _, p := range post {
			d := x.docs[p>>32]
			_, f, tf, fl := unpackPosting(p)
			set[fmt.Sprintf("%s/%d/%d/%d/%t", d.key, f, tf, fl, d.alive)] = struct{}{}
			df[(p>>29)&7]++
		}
	}
	if df != pl.df {
		set[fmt.Sprintf("df mismatch %v != %v", pl.df, df)] = struct{}{}
	}
	return set
}

// analyze is analyze with the index's termer.
func (x *textIndex) analyze(texts [NumFields]string) docTerms { return analyze(&x.termer, texts) }
