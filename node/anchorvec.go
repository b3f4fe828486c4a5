package node

import (
	"math"
	"sync"

	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// hashedField is one evaluable field in the hashed kernel, kept compact:
// its signed n-gram counts (embed.Hashed.Counts) and the inverse of their
// L2 norm. Expanded, a count c is float64(float32(c×inv)): exactly what
// embed.Hashed.Vector, widened to float64, gives.
type hashedField struct {
	name string
	// idx and cnt are the nonzero counts (idx ascending), when all fit an
	// int16; lo and hi bound them, so that a field's few distinct counts
	// expand through a table.
	idx    []uint16
	cnt    []int16
	lo, hi int16
	c32    []int32 // else all counts (a text repeating one n-gram over 32K times)
	inv    float64
}

// expandTable bounds the range of counts expanded by table.
const expandTable = 64

// hashedRecord is a record's evaluable fields in the hashed kernel, by
// name; a field whose text has no word is absent (nothing to compare).
type hashedRecord []hashedField

// hashScratch is hashFields's working memory for a kernel of dim.
type hashScratch struct {
	counts []int32 // dim
	// idx and cnt hold each field's nonzero counts, dim+1 entries a field,
	// until the record's are copied out together.
	idx []uint16
	cnt []int16
}

func newHashScratch(dim int) *hashScratch {
	return &hashScratch{counts: make([]int32, dim)}
}

// hashFields counts the n-grams of each of texts' fields, in sc (of h.Dim).
func hashFields(h embed.Hashed, texts map[string]string, sc *hashScratch) hashedRecord {
	hr := make(hashedRecord, 0, len(texts))
	scratch := sc.counts
	seg := len(scratch) + 1
	if len(sc.idx) < len(texts)*seg {
		sc.idx, sc.cnt = make([]uint16, len(texts)*seg), make([]int16, len(texts)*seg)
	}
	total := 0
	for name, t := range texts {
		clear(scratch)
		h.Counts(t, scratch)
		idx, cnt := sc.idx[len(hr)*seg:][:seg], sc.cnt[len(hr)*seg:][:seg]
		// Σc² in integers: Normalize's float64 sum of the same squares is
		// exact too (a field has at most 64 Ki n-grams), so they agree.
		var ss int64
		var lo, hi int32
		nz := 0
		for j, c := range scratch {
			ss += int64(c) * int64(c)
			lo, hi = min(lo, c), max(hi, c)
			// Every bucket is written at nz, which only moves past a
			// nonzero one: about half are zero, in no order a branch
			// could predict.
			idx[nz], cnt[nz] = uint16(j), int16(c)
			nz += int((uint32(c) | -uint32(c)) >> 31)
		}
		if ss == 0 {
			continue
		}
		f := hashedField{name: name, inv: 1 / math.Sqrt(float64(ss))}
		if lo >= math.MinInt16 && hi <= math.MaxInt16 {
			f.idx, f.cnt, f.lo, f.hi = idx[:nz], cnt[:nz], int16(lo), int16(hi) // copied out below
			total += nz
		} else {
			f.c32 = append([]int32(nil), scratch...)
		}
		hr = append(hr, f)
	}
	// One allocation each for the record's indices and counts, which the
	// cache keeps.
	idxs, cnts := make([]uint16, 0, total), make([]int16, 0, total)
	for i := range hr {
		if f := &hr[i]; f.c32 == nil {
			n := len(f.idx)
			idxs, cnts = append(idxs, f.idx...), append(cnts, f.cnt...)
			f.idx, f.cnt = idxs[len(idxs)-n:len(idxs):len(idxs)], cnts[len(cnts)-n:len(cnts):len(cnts)]
		}
	}
	return hr
}

// table is the expansion of the counts lo..hi, if they span fewer than
// expandTable.
func (f *hashedField) table() (tab [expandTable]float64, ok bool) {
	if int(f.hi)-int(f.lo) >= expandTable {
		return tab, false
	}
	for k := range int(f.hi) - int(f.lo) + 1 {
		tab[k] = float64(float32(float64(int(f.lo)+k) * f.inv))
	}
	return tab, true
}

// values writes f's nonzero entries, in idx order, to dst (of len(f.idx)).
func (f *hashedField) values(dst []float64) {
	dst = dst[:len(f.cnt)]
	tab, ok := f.table()
	if !ok {
		for k, c := range f.cnt {
			dst[k] = float64(float32(float64(c) * f.inv))
		}
		return
	}
	for k, c := range f.cnt {
		dst[k] = tab[uint16(c-f.lo)%expandTable]
	}
}

// dense writes f as Hashed.Vector's vector, widened, to v (of dim).
func (f *hashedField) dense(v []float64) {
	if f.c32 != nil {
		for j, c := range f.c32 {
			v[j] = float64(float32(float64(c) * f.inv))
		}
		return
	}
	clear(v)
	tab, ok := f.table()
	if !ok {
		for k, j := range f.idx {
			v[j] = float64(float32(float64(f.cnt[k]) * f.inv))
		}
		return
	}
	for k, j := range f.idx {
		v[j] = tab[uint16(f.cnt[k]-f.lo)%expandTable]
	}
}

// vectors are hr's fields as dense SVAF vectors, carved out of slab (which
// must hold len(hr)×dim values).
func (hr hashedRecord) vectors(slab []float64, dim int) svaf.Vectors {
	out := make(svaf.Vectors, len(hr))
	for i := range hr {
		v := slab[i*dim : (i+1)*dim : (i+1)*dim]
		hr[i].dense(v)
		out[hr[i].name] = v
	}
	return out
}

// slabSize is how many float64s anchor needs of a slab.
func (hr hashedRecord) slabSize(dim int) int {
	n := 0
	for _, f := range hr {
		switch {
		case f.c32 != nil:
			n += dim
		case int(f.hi)-int(f.lo) < expandTable:
			n += int(f.hi) - int(f.lo) + 1
		default:
			n += len(f.idx)
		}
	}
	return n
}

// anchor sets a's fields from hr, sparse (the zeros, about half the
// buckets, left out; svaf.Anchor.Sparse), with values carved out of slab
// (of at least hr.slabSize(dim)); it returns the rest of slab.
func (hr hashedRecord) anchor(a *svaf.Anchor, slab []float64, dim int) []float64 {
	for i := range hr {
		f := &hr[i]
		if f.c32 != nil {
			v := slab[:dim:dim]
			slab = slab[dim:]
			f.dense(v)
			if a.Vectors == nil {
				a.Vectors = svaf.Vectors{}
			}
			a.Vectors[f.name] = v
			continue
		}
		if a.Sparse == nil {
			a.Sparse = make(map[string]svaf.Sparse, len(hr))
		}
		if span := int(f.hi) - int(f.lo) + 1; span <= expandTable {
			// Coded: the few distinct values, each expanded once.
			tab := slab[:span:span]
			slab = slab[span:]
			for k := range tab {
				tab[k] = float64(float32(float64(int(f.lo)+k) * f.inv))
			}
			a.Sparse[f.name] = svaf.Sparse{Dim: dim, Index: f.idx, Code: f.cnt, Lo: f.lo, Table: tab}
			continue
		}
		vals := slab[:len(f.idx):len(f.idx)]
		slab = slab[len(f.idx):]
		f.values(vals)
		a.Sparse[f.name] = svaf.Sparse{Dim: dim, Index: f.idx, Value: vals}
	}
	return slab
}

// anchorVectors caches the hashed-kernel counts of anchors by key. A key
// names its record's texts (the address covers them), so a key's counts
// never change. Each incoming record is judged against the recent anchors
// (which it becomes itself next) and its nearest text matches (a topic's
// records, found again and again while it is busy); without the cache each
// of them costs a store read and an n-gram pass per field.
//
// It keeps two generations of anchorVectorsGen records: when the current
// one fills it becomes the old one, and a record found there moves back, so
// what was used lately stays. A field's counts take 4 bytes per nonzero
// bucket, so at most 2 KB at the default 512 dimensions whatever its
// text's length, and about 0.9 KB for a standard 300-byte field: the cache
// holds about 2 × 1024 × 6.5 KB ≈ 13 MB of standard records, at most
// 2 × 1024 × 14 KB ≈ 29 MB of records of seven long fields.
type anchorVectors struct {
	mu       sync.Mutex
	cur, old map[string]hashedRecord
}

const anchorVectorsGen = 1024

func (c *anchorVectors) get(key string) (hashedRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cur[key]; ok {
		return v, true
	}
	v, ok := c.old[key]
	if ok {
		delete(c.old, key)
		c.putLocked(key, v)
	}
	return v, ok
}

func (c *anchorVectors) put(key string, v hashedRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(key, v)
}

func (c *anchorVectors) putLocked(key string, v hashedRecord) {
	if c.cur == nil || len(c.cur) >= anchorVectorsGen {
		c.old, c.cur = c.cur, make(map[string]hashedRecord, anchorVectorsGen)
	}
	c.cur[key] = v
}
