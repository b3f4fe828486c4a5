package store

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// textIndex is the inverted index over the seven fields. It lives in memory
// and is rebuilt from the stored texts at Open: records are what must be
// durable, and a memory-resident index answers BM25 queries over 100k records
// in well under a millisecond per term, which posting keys in badger cannot.
type textIndex struct {
	mu       sync.RWMutex
	terms    map[string]*postingList
	docs     []docInfo
	byKey    map[string]uint32
	groups   map[string]string // interned group names
	live     int
	totalLen [NumFields]int64

	scratch sync.Pool // *scoreScratch
}

// A posting packs doc<<32 | field<<29 | tf.
type postingList struct {
	df   [NumFields]int32
	post []uint64
}

const tfMask = 1<<29 - 1

type docInfo struct {
	key       string
	group     string
	createdAt int64
	lens      [NumFields]uint32
	alive     bool
}

type scoreScratch struct {
	score   []float64
	touched []uint32
}

func newTextIndex() *textIndex {
	return &textIndex{
		terms:  map[string]*postingList{},
		byKey:  map[string]uint32{},
		groups: map[string]string{},
	}
}

func (x *textIndex) termCount() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.terms)
}

func (x *textIndex) add(key string, createdAt int64, group string, d docTerms) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.addLocked(key, createdAt, group, d)
}

func (x *textIndex) addLocked(key string, createdAt int64, group string, d docTerms) {
	if id, ok := x.byKey[key]; ok && x.docs[id].alive {
		return
	}
	g, ok := x.groups[group]
	if !ok {
		x.groups[group] = group
		g = group
	}
	id := uint32(len(x.docs))
	x.docs = append(x.docs, docInfo{key: key, group: g, createdAt: createdAt, lens: d.lens, alive: true})
	x.byKey[key] = id
	x.live++
	for f, l := range d.lens {
		x.totalLen[f] += int64(l)
	}
	for _, ft := range d.terms {
		pl := x.terms[ft.term]
		if pl == nil {
			pl = &postingList{}
			x.terms[ft.term] = pl
		}
		tf := min(ft.tf, tfMask)
		pl.post = append(pl.post, uint64(id)<<32|uint64(ft.field)<<29|uint64(tf))
		pl.df[ft.field]++
	}
}

// remove drops documents; terms lists, per document, the terms it was
// indexed under (recomputed from its stored texts).
func (x *textIndex) remove(keys []string, terms []docTerms) {
	x.mu.Lock()
	defer x.mu.Unlock()
	dead := map[uint32]struct{}{}
	affected := map[string]struct{}{}
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
			affected[ft.term] = struct{}{}
		}
	}
	for t := range affected {
		pl := x.terms[t]
		if pl == nil {
			continue
		}
		kept := pl.post[:0]
		for _, p := range pl.post {
			if _, gone := dead[uint32(p>>32)]; gone {
				pl.df[(p>>29)&7]--
				continue
			}
			kept = append(kept, p)
		}
		pl.post = kept
		if len(kept) == 0 {
			delete(x.terms, t)
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
	for _, pl := range x.terms {
		for i, p := range pl.post {
			pl.post[i] = uint64(remap[p>>32])<<32 | p&(1<<32-1)
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
	// measured from AsOf to the record's createdAt.
	RecencyWeight float64
	HalfLife      time.Duration // default 7 days
	// Group restricts hits to one group ("" = any).
	Group string
	// AsOf hides records created after it and anchors recency (zero = now).
	AsOf time.Time
	// K1 and B are the BM25 parameters (defaults 1.2 and 0.75).
	K1, B float64
}

// Hit is one search result.
type Hit struct {
	Key       string
	CreatedAt int64
	Group     string
	Score     float64 // Text + Recency
	Text      float64
	Recency   float64
}

// Search ranks records against query with per-field BM25 plus recency.
func (s *Store) Search(ctx context.Context, query string, o SearchOptions) ([]Hit, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.Limit <= 0 {
		o.Limit = 10
	}
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
	if o.HalfLife <= 0 {
		o.HalfLife = 7 * 24 * time.Hour
	}
	if o.K1 <= 0 {
		o.K1 = 1.2
	}
	if o.B <= 0 || o.B > 1 {
		o.B = 0.75
	}
	asOf := o.AsOf
	if asOf.IsZero() {
		asOf = s.opts.Now()
	}
	qterms := uniq(Tokenize(query))
	if len(qterms) == 0 {
		return nil, nil
	}
	return s.idx.search(qterms, o, asOf.UnixMilli(), !o.AsOf.IsZero()), nil
}

func uniq(in []string) []string {
	seen := make(map[string]struct{}, len(in))
	out := in[:0]
	for _, t := range in {
		if _, ok := seen[t]; !ok {
			seen[t] = struct{}{}
			out = append(out, t)
		}
	}
	return out
}

func (x *textIndex) search(qterms []string, o SearchOptions, asOfMs int64, hideLater bool) []Hit {
	x.mu.RLock()
	defer x.mu.RUnlock()
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

	n := float64(x.live)
	var avg [NumFields]float64
	for f := range avg {
		avg[f] = float64(x.totalLen[f]) / n
		if avg[f] == 0 {
			avg[f] = 1
		}
	}
	var gname string
	filterGroup := o.Group != ""
	if filterGroup {
		g, ok := x.groups[o.Group]
		if !ok {
			return nil
		}
		gname = g
	}
	k1, b := o.K1, o.B
	for _, t := range qterms {
		pl := x.terms[t]
		if pl == nil {
			continue
		}
		var idf [NumFields]float64
		for f := range idf {
			df := float64(pl.df[f])
			idf[f] = o.FieldWeights[f] * math.Log(1+(n-df+0.5)/(df+0.5))
		}
		for _, p := range pl.post {
			f := (p >> 29) & 7
			if idf[f] == 0 {
				continue
			}
			id := uint32(p >> 32)
			d := &x.docs[id]
			if filterGroup && d.group != gname {
				continue
			}
			if hideLater && d.createdAt > asOfMs {
				continue
			}
			tf := float64(p & tfMask)
			norm := k1 * (1 - b + b*float64(d.lens[f])/avg[f])
			if sc.score[id] == 0 {
				sc.touched = append(sc.touched, id)
			}
			sc.score[id] += idf[f] * tf * (k1 + 1) / (tf + norm)
		}
	}

	h := hitHeap{}
	halfLifeMs := float64(o.HalfLife.Milliseconds())
	for _, id := range sc.touched {
		d := &x.docs[id]
		hit := Hit{Key: d.key, CreatedAt: d.createdAt, Group: d.group, Text: sc.score[id]}
		if o.RecencyWeight != 0 {
			age := float64(max(asOfMs-d.createdAt, 0))
			hit.Recency = o.RecencyWeight * math.Exp2(-age/halfLifeMs)
		}
		hit.Score = hit.Text + hit.Recency
		if len(h) < o.Limit {
			heap.Push(&h, hit)
		} else if better(hit, h[0]) {
			h[0] = hit
			heap.Fix(&h, 0)
		}
	}
	out := []Hit(h)
	sort.Slice(out, func(i, j int) bool { return better(out[i], out[j]) })
	return out
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

// snapshot renders the index as comparable text facts, for Check.
func (x *textIndex) snapshot() (docs map[string]string, postings map[string]map[string]struct{}) {
	docs = map[string]string{}
	for _, d := range x.docs {
		if d.alive {
			docs[d.key] = fmt.Sprintf("t=%d g=%q lens=%v", d.createdAt, d.group, d.lens)
		}
	}
	postings = map[string]map[string]struct{}{}
	for t, pl := range x.terms {
		set := make(map[string]struct{}, len(pl.post))
		var df [NumFields]int32
		for _, p := range pl.post {
			d := x.docs[p>>32]
			set[fmt.Sprintf("%s/%d/%d/%t", d.key, (p>>29)&7, p&tfMask, d.alive)] = struct{}{}
			df[(p>>29)&7]++
		}
		if df != pl.df {
			set[fmt.Sprintf("df mismatch %v != %v", pl.df, df)] = struct{}{}
		}
		postings[t] = set
	}
	return docs, postings
}
