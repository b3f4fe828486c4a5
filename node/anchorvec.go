package node

import (
	"math"
	"math/bits"
	"strings"
	"sync"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// hashedField is one evaluable field in the hashed kernel: the nonzero
// buckets of its signed n-gram counts (embed.Hashed.Counts), each count c
// worth float64(float32(c×inv)) with inv the inverse of their L2 norm,
// which is exactly what embed.Hashed.Vector gives, widened to float64.
//
// When its counts span at most expandTable values (a standard field's
// span about ten), vec is kept as SVAF reads it: coded, Index and Code
// (the counts) with Table, the values of Lo..Lo+len(Table)-1. Else inv is
// set and the values are made at each judgement (sparse): from Index and
// Code when every count fits an int16, from c32, all Dim counts, when one
// does not (a text repeating one n-gram over 32K times). So a field takes
// 4 bytes a nonzero bucket and its table (at most 2 KB and 0.5 KB at the
// default 512 dimensions), or 2 KB of int32 counts. vec.NN is Σ value²
// in bucket order, as SVAF would sum it, made once.
type hashedField struct {
	field int // index in cmb.FieldNames
	vec   svaf.Sparse
	inv   float64 // nonzero: values not kept, made from vec.Code or c32
	c32   []int32
}

// expandTable bounds the range of counts expanded by table.
const expandTable = 64

// hashedRecord is a record's evaluable fields in the hashed kernel, in
// fieldsByName order, the order SVAF sums fields in; a field whose text
// has no word is absent (nothing to compare). It is never modified once
// made: the cache shares it between judgements.
type hashedRecord []hashedField

// fieldsByName are the indices of cmb.FieldNames in ascending name
// order; fieldRank is each field's place in it.
var fieldsByName, fieldRank = func() (order, rank [cmb.NumFields]int) {
	for i := range order {
		order[i] = i
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && cmb.FieldNames[order[j]] < cmb.FieldNames[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for r, f := range order {
		rank[f] = r
	}
	return order, rank
}()

// evaluableText is t as SVAF judges it: MMP treats an absent or "neutral"
// field as non-evaluable.
func evaluableText(t string) (string, bool) {
	t = strings.TrimSpace(t)
	return t, t != "" && !strings.EqualFold(t, "neutral")
}

// hashScratch is hashFields's working memory for a kernel of dim.
type hashScratch struct {
	// counts are a field's n-gram counts, touched a bit for each bucket
	// of counts the field may have changed (embed.Hashed.CountsTouched):
	// reading a field's nonzero counts clears both, so they are all zero
	// whenever hashFields is not counting a field.
	counts  []int32  // dim
	touched []uint64 // (dim+63)/64
	// idx and code hold each field's nonzero buckets and their counts as
	// int16 (a field whose counts do not fit is counted again), dim
	// entries a field, until the record's are copied out together.
	idx   []uint16
	code  []int16
	words []uint64 // a field's words' hashes, for a signature
}

func newHashScratch(dim int) *hashScratch {
	return &hashScratch{counts: make([]int32, dim), touched: make([]uint64, (dim+63)/64)}
}

// hashFields counts the n-grams of each of texts' evaluable fields, in sc
// (of h.Dim). Unless ns is nil it adds their words to ns too, in the same
// pass over each text (embed.Hashed.CountsWords).
func hashFields(h embed.Hashed, texts *[cmb.NumFields]string, sc *hashScratch, ns *nearSigner) hashedRecord {
	dim := len(sc.counts)
	if len(sc.idx) < cmb.NumFields*dim {
		sc.idx, sc.code = make([]uint16, cmb.NumFields*dim), make([]int16, cmb.NumFields*dim)
	}
	type counted struct {
		field, nz int
		lo, hi    int32
		inv       float64
	}
	var fs [cmb.NumFields]counted
	nf := 0
	nIdx, nTab, n32 := 0, 0, 0 // what the record's fields need
	for _, fi := range fieldsByName {
		t, ok := evaluableText(texts[fi])
		if !ok {
			continue
		}
		if ns != nil {
			sc.words = h.CountsWords(t, sc.counts, sc.touched, sc.words[:0])
			ns.addField(fi, sc.words)
		} else {
			h.CountsTouched(t, sc.counts, sc.touched)
		}
		idx, code := sc.idx[nf*dim:(nf+1)*dim], sc.code[nf*dim:(nf+1)*dim]
		// The touched buckets in ascending order, each cleared as it is
		// read. Σc² in integers: Normalize's float64 sum of the same
		// squares is exact too (a field has at most 64 Ki n-grams), so
		// they agree.
		nz := 0
		var ss int64
		var lo, hi int32 // of all the counts, zeros too
		counts := sc.counts
		for w, set := range sc.touched {
			for ; set != 0; set &= set - 1 {
				j := w*64 + bits.TrailingZeros64(set)
				c := counts[j]
				counts[j] = 0
				// Every touched bucket is written at nz, which only
				// moves past a nonzero one: some counts cancel to zero,
				// in no order a branch could predict.
				idx[nz], code[nz] = uint16(j), int16(c)
				nz += int((uint32(c) | -uint32(c)) >> 31)
				ss += int64(c) * int64(c)
				lo, hi = min(lo, c), max(hi, c)
			}
			sc.touched[w] = 0
		}
		if ss == 0 {
			continue
		}
		fs[nf] = counted{field: fi, nz: nz, lo: lo, hi: hi, inv: 1 / math.Sqrt(float64(ss))}
		switch {
		case lo < math.MinInt16 || hi > math.MaxInt16:
			n32 += dim
		case hi-lo < expandTable:
			nIdx, nTab = nIdx+nz, nTab+int(hi-lo)+1
		default:
			nIdx += nz
		}
		nf++
	}
	// One allocation each for the record's indices, codes, tables and
	// int32 counts, which the cache keeps.
	hr := make(hashedRecord, nf)
	idxs, codes, tabs := make([]uint16, nIdx), make([]int16, nIdx), make([]float64, nTab)
	var c32s []int32
	if n32 > 0 {
		c32s = make([]int32, n32)
	}
	// The fields coded through a table, whose NN is summed after.
	var codedBuf [cmb.NumFields]*svaf.Sparse
	coded := codedBuf[:0]
	for k := range hr {
		c := fs[k]
		idx, code := sc.idx[k*dim:k*dim+c.nz], sc.code[k*dim:k*dim+c.nz]
		f := &hr[k]
		f.field, f.vec.Dim = c.field, dim
		if c.lo < math.MinInt16 || c.hi > math.MaxInt16 {
			// The codes are truncated: the field's counts are made again
			// (a text of over 32 Ki copies of one n-gram).
			f.c32, c32s = c32s[:dim:dim], c32s[dim:]
			t, _ := evaluableText(texts[c.field])
			h.CountsTouched(t, f.c32, sc.touched)
			clear(sc.touched)
			f.inv = c.inv
			for _, x := range f.c32 {
				y := float64(float32(float64(x) * c.inv))
				f.vec.NN += y * y
			}
			continue
		}
		f.vec.Index, idxs = idxs[:c.nz:c.nz], idxs[c.nz:]
		f.vec.Code, codes = codes[:c.nz:c.nz], codes[c.nz:]
		copy(f.vec.Index, idx)
		copy(f.vec.Code, code)
		if c.hi-c.lo >= expandTable {
			f.inv = c.inv
			for _, x := range code {
				y := float64(float32(float64(x) * c.inv))
				f.vec.NN += y * y
			}
			continue
		}
		span := int(c.hi-c.lo) + 1
		f.vec.Table, tabs = tabs[:span:span], tabs[span:]
		f.vec.Lo = int16(c.lo)
		for e := range f.vec.Table {
			f.vec.Table[e] = float64(float32(float64(c.lo+int32(e)) * c.inv))
		}
		coded = append(coded, &f.vec)
	}
	for ; len(coded) >= 2; coded = coded[2:] {
		coded[0].NN, coded[1].NN = normPair(coded[0], coded[1])
	}
	if len(coded) == 1 {
		coded[0].NN = coded[0].Norm()
	}
	return hr
}

// normPair is the Norm of a and b, both coded through a table: each
// sum in its own order as Norm makes it, the two side by side so that
// neither waits on the other's additions.
func normPair(a, b *svaf.Sparse) (na, nb float64) {
	ca, ta, la := a.Code[:len(a.Index)], a.Table, int(a.Lo)
	cb, tb, lb := b.Code[:len(b.Index)], b.Table, int(b.Lo)
	n := min(len(ca), len(cb))
	for k := range n {
		ya, yb := ta[int(ca[k])-la], tb[int(cb[k])-lb]
		na += ya * ya
		nb += yb * yb
	}
	for _, c := range ca[n:] {
		y := ta[int(c)-la]
		na += y * y
	}
	for _, c := range cb[n:] {
		y := tb[int(c)-lb]
		nb += y * y
	}
	return na, nb
}

// sparse is f's vector as SVAF reads it, its values made in buf when they
// are not kept; it returns the rest of buf, which must hold f.values().
func (f *hashedField) sparse(buf []float64) (svaf.Sparse, []float64) {
	if f.inv == 0 {
		return f.vec, buf
	}
	v := f.vec
	n := f.values()
	vals := buf[:n:n]
	if f.c32 != nil {
		v.Index = nil
		for j, x := range f.c32 {
			vals[j] = float64(float32(float64(x) * f.inv))
		}
	} else {
		for k, x := range v.Code {
			vals[k] = float64(float32(float64(x) * f.inv))
		}
	}
	v.Value, v.Code = vals, nil
	return v, buf[n:]
}

// values is how many values sparse makes for f.
func (f *hashedField) values() int {
	switch {
	case f.inv == 0:
		return 0
	case f.c32 != nil:
		return len(f.c32)
	}
	return len(f.vec.Index)
}

// dense writes f's vector, dense, to x (of its Dim).
func (f *hashedField) dense(x []float64) {
	v := &f.vec
	if f.c32 != nil {
		for j, c := range f.c32 {
			x[j] = float64(float32(float64(c) * f.inv))
		}
		return
	}
	clear(x)
	if f.inv != 0 {
		for k, j := range v.Index {
			x[j] = float64(float32(float64(v.Code[k]) * f.inv))
		}
		return
	}
	code, tab, lo := v.Code[:len(v.Index)], v.Table, int(v.Lo)
	for k, j := range v.Index {
		x[j] = tab[int(code[k])-lo]
	}
}

// anchorVectors caches the hashed-kernel counts of anchors by key. A key
// names its record's texts (the address covers them), so a key's counts
// never change. Each incoming record is judged against the recent anchors
// (which it becomes itself next) and the records it nearly copies; without
// the cache each of them costs a store read and an n-gram pass per field.
//
// It keeps two generations of anchorVectorsGen records: when the current
// one fills it becomes the old one, and a record found there moves back, so
// what was used lately stays. A field's counts take 4 bytes per nonzero
// bucket and 8 bytes a value of its table, with 160 bytes of hashedField,
// so at most 2.7 KB at the default 512 dimensions whatever its text's
// length, and about 0.8 KB for a standard 300-byte field (114 buckets, a
// table of 22): the cache holds about 2 × 1024 × 5.5 KB ≈ 11 MB of
// standard records, at most 2 × 1024 × 19 KB ≈ 39 MB of records of seven
// long fields.
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
