package store

import (
	"slices"
	"sync"
)

// New documents' postings go to a delta before the index proper. Adding a
// record's ~120 postings straight to the index costs, per term, a lookup in
// a table of every term and an append at the tail of that term's list:
// cache misses, which would make up most of indexing. The delta holds the
// postings of the last few hundred documents in a table small enough to
// stay in cache plus one flat array; a merge then looks each distinct term
// up once and appends all its postings at a time. Under Zipf-distributed
// text a few hundred documents share most of their terms, so the index
// sees several times fewer lookups.
//
// Documents themselves (docs, byKey, lengths) are added at once; only their
// postings wait. A search reads a term's postings in the index and then in
// the delta (the delta's documents are all newer, so that is the order a
// merge would give its list), and its document frequencies as the sum of
// both, so it finds what it would after a merge without paying for one:
// searches made while records arrive (recall during gossip) would
// otherwise each merge a part-filled delta, which undoes the batching
// that is the delta's point. Everything else that reads postings merges
// first (mergeLocked).
type delta struct {
	slots []uint32 // open addressing over terms, index+1; 0 is empty
	terms []deltaTerm
	// lids[i] is the term of posting posts[i], in the order added, which
	// is document order; prev[i] is the index+1 in posts of the term's
	// posting before it (0: none), so a term's postings are a chain from
	// its last.
	lids   []uint32
	posts  []uint64
	prev   []uint32
	sorted []uint64 // merge scratch
	// gen counts the merges that emptied the delta, which end the life
	// of its term ids: a stem cache entry's delta term (stemEntry.lid)
	// is one of this delta's if its dgen is gen+1 (0 marks none).
	gen uint32
	// touched sums what textIndex.prefetch loaded; it means nothing.
	touched uint64
}

type deltaTerm struct {
	// term is the string the termer made: every term the index is given
	// is one of its cache's own copies (tokenize.go), so the same term
	// from a later record is most often the same string, which Go's ==
	// finds equal without reading its bytes; and the index keeps it
	// without copying it, or keeping any record's text alive.
	term string
	hash uint32
	n    uint32 // during a merge, where the term's run ends
	last uint32 // index+1 in posts of the term's latest posting
	// df counts the term's postings by field. A term has at most one
	// posting per document and field, and the delta is merged once it
	// holds deltaMax postings, so no count nears the limit of uint16.
	df [NumFields]uint16
}

const (
	// deltaMax is how many postings the delta takes before it is merged:
	// ~270 records of 1 KB, whose terms fit in a 512 KB L2 cache.
	deltaMax   = 32 << 10
	deltaSlots = 1 << 14
	// mergeSlice is how many terms a merge adds between yields (a few tens
	// of µs of work; see textIndex.yield).
	mergeSlice = 128
	// mergeGroup is how many terms prefetch loads at a time.
	mergeGroup = 16
)

// prefetch loads what looking up and appending to the index's lists of
// terms will touch: their slots, then their lists and the tails of their
// postings. Loaded a group at a time, the cache misses of different terms
// overlap, where the lookups one after another would wait for each in
// turn (most of a merge's time at 100k records).
func (x *textIndex) prefetch(terms []deltaTerm) {
	var hs [mergeGroup]uint32
	for k := range terms {
		hs[k] = terms[k].hash
	}
	// Kept, so that the compiler keeps the loads.
	x.delta.touched += x.terms.touch(hs[:len(terms)], true)
}

// touch loads the slots of the terms of hashes hs (at most mergeGroup),
// then their lists, their terms' bytes and, if tails, the last of their
// postings, and returns a sum of what it loaded, which means nothing: the
// caller keeps it so that the loads are kept.
func (tt *termTable) touch(hs []uint32, tails bool) uint64 {
	if len(tt.slots) == 0 {
		return 0
	}
	mask := len(tt.slots) - 1
	var slots [mergeGroup]termSlot
	for k, h := range hs {
		slots[k] = tt.slots[int(h)&mask]
	}
	var sum uint64
	for k := range hs {
		if s := slots[k]; s.list != 0 {
			pl := tt.list(s.list - 1)
			if n := len(pl.post); tails && n > 0 {
				sum += pl.post[n-1]
			}
			if len(pl.term) > 0 {
				sum += uint64(pl.term[0])
			}
		}
	}
	return sum
}

func (d *delta) empty() bool { return len(d.lids) == 0 }

// add records posting p of term t (hash h).
func (d *delta) add(t string, h uint32, p uint64) { d.push(d.termID(t, h), p) }

// push records posting p of term lid.
func (d *delta) push(lid uint32, p uint64) {
	e := &d.terms[lid]
	d.lids = append(d.lids, lid)
	d.posts = append(d.posts, p)
	d.prev = append(d.prev, e.last)
	e.last = uint32(len(d.posts))
	e.df[(p>>29)&7]++
}

// lookup returns term t's entry (hash h), or nil if the delta has none.
func (d *delta) lookup(t string, h uint32) *deltaTerm {
	if len(d.terms) == 0 {
		return nil
	}
	mask := uint32(len(d.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := d.slots[i]
		if s == 0 {
			return nil
		}
		if e := &d.terms[s-1]; e.hash == h && e.term == t {
			return e
		}
	}
}

// appendPosts appends e's postings to dst in the order they were added.
func (d *delta) appendPosts(dst []uint64, e *deltaTerm) []uint64 {
	n := 0
	for _, c := range e.df {
		n += int(c)
	}
	k := len(dst) + n
	dst = slices.Grow(dst, n)[:k]
	for i := e.last; i != 0; i = d.prev[i-1] {
		k--
		dst[k] = d.posts[i-1]
	}
	return dst
}

func (d *delta) termID(t string, h uint32) uint32 {
	if d.slots == nil {
		d.slots = make([]uint32, deltaSlots)
	}
	mask := uint32(len(d.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := d.slots[i]
		if s == 0 {
			d.terms = append(d.terms, deltaTerm{term: t, hash: h})
			d.slots[i] = uint32(len(d.terms))
			if 2*len(d.terms) > len(d.slots) {
				d.grow()
			}
			return uint32(len(d.terms) - 1)
		}
		if e := &d.terms[s-1]; e.hash == h && e.term == t {
			return s - 1
		}
	}
}

// touch loads the slots and terms of a group of terms (by their hashes),
// so that the cache misses of the lookups that follow overlap, and
// returns a sum of what it loaded, which means nothing: the caller keeps
// it so that the loads are kept.
func (d *delta) touch(hashes []uint32) uint64 {
	if d.slots == nil {
		return 0
	}
	mask := uint32(len(d.slots) - 1)
	var sum uint32
	for _, h := range hashes {
		if s := d.slots[h&mask]; s != 0 {
			sum += d.terms[s-1].hash
		}
	}
	return uint64(sum)
}

func (d *delta) grow() {
	d.slots = rehash(2*len(d.slots), len(d.terms), func(j int) uint32 { return d.terms[j].hash })
}

// mergeLocked moves the delta's postings into the index.
func (x *textIndex) mergeLocked() {
	d := &x.delta
	if d.empty() {
		return
	}
	// A stable counting sort by term keeps each term's run in document
	// order, which is the order of the index's lists. A term's run is as
	// long as its postings, which its df counts (push), so the runs'
	// starts come from the terms alone, without a pass over the postings.
	var end uint32
	for i := range d.terms {
		e := &d.terms[i]
		e.n = end // start
		for _, c := range e.df {
			end += uint32(c)
		}
	}
	if cap(d.sorted) < len(d.posts) {
		d.sorted = make([]uint64, len(d.posts))
	}
	sorted := d.sorted[:len(d.posts)]
	for i, l := range d.lids {
		e := &d.terms[l]
		sorted[e.n] = d.posts[i]
		e.n++ // ends as the run's end
		if i%(8*mergeSlice) == 0 && x.yield != nil {
			x.yield()
		}
	}
	var start uint32
	for i := range d.terms {
		if i%mergeGroup == 0 {
			x.prefetch(d.terms[i:min(i+mergeGroup, len(d.terms))])
		}
		if i%mergeSlice == mergeSlice-1 && x.yield != nil {
			// A merge takes milliseconds; writers waiting for a P to
			// prepare their next puts cannot wait that long (indexer).
			x.yield()
		}
		e := &d.terms[i]
		run := sorted[start:e.n]
		start = e.n
		var pl *postingList
		if j, ok := x.terms.find(e.term, e.hash); ok {
			pl = x.terms.inSlot(j)
		} else {
			pl = x.terms.insert(j, e.term, e.hash)
		}
		x.terms.appendPostings(pl, run)
		// The run is the term's postings, which e.df counts by field.
		for f, c := range e.df {
			pl.df[f] += int32(c)
		}
	}
	// The table keeps the size a usual delta grows it to (8-16k terms);
	// one grown for an unusually large delta is not kept.
	clear(d.terms) // they hold the terms
	d.terms = d.terms[:0]
	d.lids = d.lids[:0]
	d.posts = d.posts[:0]
	d.prev = d.prev[:0]
	if len(d.slots) > 4*deltaSlots {
		d.slots = nil
	} else {
		clear(d.slots)
	}
	if d.gen++; d.gen+1 == 0 {
		// gen+1 would be the 0 of entries that have no delta term.
		x.termer.forgetDelta()
		d.gen = 0
	}
}

// recordTokens is a record's words, field after field: field f's are
// toks[ends[f-1]:ends[f]].
type recordTokens struct {
	toks []string
	ends [NumFields]int32
}

var tokenBufs = sync.Pool{New: func() any { return new(recordTokens) }}

// addTexts tokenises a record's texts and adds it. Its words are found
// before the lock is taken; under it, each word's stem cache entry gives
// its term and, from the word's last occurrence since the delta's last
// merge, the term's entry in the delta (stemEntry.lid), so that a word
// costs one lookup where its term and then its delta entry cost two.
// Tokens go straight to the delta, which counts each term's frequency per
// field as it goes: the path puts and start-up take, where analyze would
// first build a table of the record's own distinct terms.
func (x *textIndex) addTexts(key string, at int64, group string, texts [NumFields]string) {
	rt := tokenBufs.Get().(*recordTokens)
	rt.words(texts)
	x.mu.Lock()
	x.addWordsLocked(key, at, group, rt)
	x.mu.Unlock()
	clear(rt.toks[:cap(rt.toks)]) // they point into the record's texts, stop words too
	tokenBufs.Put(rt)
}

// words sets rt to the words of texts, field after field.
func (rt *recordTokens) words(texts [NumFields]string) {
	rt.toks = rt.toks[:0]
	for f, t := range texts {
		if t != neutralText {
			// The protocol's placeholder for an unfilled field says nothing
			// about the record (as in analyze).
			rt.toks = appendTokens(rt.toks, t)
		}
		rt.ends[f] = int32(len(rt.toks))
	}
}

// addWordsLocked adds a document from its words (words), with the
// postings analyze and addLocked would give it.
func (x *textIndex) addWordsLocked(key string, at int64, group string, rt *recordTokens) {
	if id, ok := x.byKey[key]; ok && x.docs[id].alive {
		return
	}
	id := uint32(len(x.docs))
	var lens [NumFields]uint32
	d := &x.delta
	tm := &x.termer
	// The termer's lock is only ever taken under the index's, never the
	// other way round (queries make their terms before they take it).
	tm.mu.Lock()
	var ks [stemGroup]wordKey
	j := 0 // rt.toks[j] is the word at hand
	for f := range NumFields {
		start := len(d.posts)
		n := uint32(0)
		for ; j < int(rt.ends[f]); j++ {
			// A group at a time, as terms does, across fields.
			if j%stemGroup == 0 {
				tm.touchLocked(rt.toks[j:min(j+stemGroup, len(rt.toks))], &ks)
			}
			// The common case, a word of up to 16 bytes in its home slot,
			// is entryLocked's first probe written out here.
			w, k := rt.toks[j], ks[j%stemGroup]
			var se *stemEntry
			if m := len(tm.cur.ents); m > 0 && len(w) <= 16 {
				if e := &tm.cur.ents[k.hash&uint32(m-1)]; e.head == k.head && e.wlen == uint32(len(w)) {
					se = e
				}
			}
			if se == nil {
				se = tm.entryLocked(w, k)
			}
			if se.stem == "" {
				continue
			}
			n++
			if se.dgen != d.gen+1 {
				se.lid, se.dgen = d.termID(se.stem, se.shash), d.gen+1
			}
			lid := se.lid
			e := &d.terms[lid]
			if int(e.last) > start { // already in this field: count it
				if p := &d.posts[e.last-1]; (*p>>17)&tfMax < tfMax {
					*p += 1 << 17
				}
				continue
			}
			d.push(lid, packPosting(id, uint8(f), 1, 0))
		}
		lens[f] = n
		// The field's length is known only now.
		fl := uint64(min(n, lenMax))
		for i := start; i < len(d.posts); i++ {
			d.posts[i] |= fl
		}
	}
	tm.mu.Unlock()
	x.addDocLocked(key, at, group, lens)
	if len(d.lids) >= deltaMax {
		x.mergeLocked()
	}
}
