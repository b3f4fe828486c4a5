package node

import (
	"math"
	"sync"

	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// hashedField is one evaluable field in the hashed kernel, kept compact:
// its signed n-gram counts (embed.Hashed.Counts) and the inverse of their
// L2 norm. vector expands it to exactly what embed.Hashed.Vector, widened
// to float64, would give: the same float32 rounding of count×inv.
type hashedField struct {
	name string
	c16  []int16 // the counts, when all fit
	c32  []int32 // else (a text repeating one n-gram over 32K times)
	inv  float64
	// lo and hi bound c16's counts: a field's few distinct counts expand
	// through a table.
	lo, hi int16
}

// expandTable bounds the range of counts vectors expands by table.
const expandTable = 64

// hashedRecord is a record's evaluable fields in the hashed kernel, by
// name; a field whose text has no word is absent (nothing to compare).
type hashedRecord []hashedField

// hashFields counts the n-grams of each of texts' fields, using scratch
// (of h.Dim) between fields.
func hashFields(h embed.Hashed, texts map[string]string, scratch []int32) hashedRecord {
	hr := make(hashedRecord, 0, len(texts))
	all := make([]int16, len(texts)*len(scratch)) // one allocation for the record
	for name, t := range texts {
		clear(scratch)
		h.Counts(t, scratch)
		c16 := all[:len(scratch):len(scratch)]
		var s float64
		var lo, hi int32
		for i, c := range scratch {
			s += float64(c) * float64(c) // exact: integers far below 2^53
			lo, hi = min(lo, c), max(hi, c)
			c16[i] = int16(c) // kept only if every count fits
		}
		if s == 0 {
			continue
		}
		f := hashedField{name: name, inv: 1 / math.Sqrt(s)}
		if lo >= math.MinInt16 && hi <= math.MaxInt16 {
			f.c16, f.lo, f.hi = c16, int16(lo), int16(hi)
			all = all[len(scratch):]
		} else {
			f.c32 = append([]int32(nil), scratch...)
		}
		hr = append(hr, f)
	}
	return hr
}

// vectors are hr's fields as SVAF vectors, carved out of slab (which must
// hold len(hr)×dim values); each is Hashed.Vector's, widened.
func (hr hashedRecord) vectors(slab []float64, dim int) svaf.Vectors {
	out := make(svaf.Vectors, len(hr))
	for i, f := range hr {
		v := slab[i*dim : (i+1)*dim : (i+1)*dim]
		if f.c16 != nil && int(f.hi)-int(f.lo) < expandTable {
			var tab [expandTable]float64
			for k := range int(f.hi) - int(f.lo) + 1 {
				tab[k] = float64(float32(float64(int(f.lo)+k) * f.inv))
			}
			for j, c := range f.c16 {
				v[j] = tab[uint16(c-f.lo)%expandTable]
			}
		} else if f.c16 != nil {
			for j, c := range f.c16 {
				v[j] = float64(float32(float64(c) * f.inv))
			}
		} else {
			for j, c := range f.c32 {
				v[j] = float64(float32(float64(c) * f.inv))
			}
		}
		out[f.name] = v
	}
	return out
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
// what was used lately stays. A record's counts are 1 KB per evaluable
// field at the default 512 dimensions, whatever its text's length (7 KB for
// a record of seven fields): the cache holds at most about 2 × 1024 × 7 KB
// ≈ 15 MB.
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
