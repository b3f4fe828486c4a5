// Package svaf is MMP §9.2's baseline admission evaluator: the cosine
// readout of an incoming record's per-field vectors against the receiver's
// anchors, with the temporal blend and the nearest-anchor redundancy basis
// of §9.2.1. It is pure arithmetic over vectors: which records are anchors
// and where the vectors come from is the node's business (node/svaf.go).
//
// fixtures/mmp/svaf-baseline.json holds the published conformance vectors;
// svaf_test.go reproduces all of them.
package svaf

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Decision is SVAF's verdict κ on one record.
type Decision string

// The four verdicts of §9.2. Aligned and Guarded admit; Redundant and
// Rejected do not (MMP would store nothing; cmbnode keeps the record with
// its verdict and lets the surface policy decide what is shown).
const (
	Aligned   Decision = "aligned"
	Guarded   Decision = "guarded"
	Redundant Decision = "redundant"
	Rejected  Decision = "rejected"
)

// Decisions lists the four verdicts, most admitted first.
func Decisions() []Decision { return []Decision{Aligned, Guarded, Redundant, Rejected} }

// Valid reports whether d is one of the four verdicts.
func (d Decision) Valid() bool {
	switch d {
	case Aligned, Guarded, Redundant, Rejected:
		return true
	}
	return false
}

// Admitted reports whether d admits the record (aligned or guarded).
func (d Decision) Admitted() bool { return d == Aligned || d == Guarded }

// ParseDecision reads a verdict's name.
func ParseDecision(s string) (Decision, error) {
	d := Decision(s)
	if !d.Valid() {
		return "", fmt.Errorf("svaf: %q is not a decision (aligned, guarded, redundant, rejected)", s)
	}
	return d, nil
}

// Config are the evaluator's thresholds (MMP §10.2 defaults in Default).
type Config struct {
	// Redundant: max over fields of the nearest-anchor drift below it is
	// redundant (T_redundant).
	Redundant float64
	// Aligned and Guarded bound totalDrift for those verdicts (T_aligned,
	// T_guarded); above Guarded is rejected.
	Aligned, Guarded float64
	// Lambda is the temporal term's share of totalDrift (λ).
	Lambda float64
	// Freshness is τ: it scales both the incoming record's temporal drift
	// and each anchor's weight exp(−age/τ).
	Freshness time.Duration
	// FieldWeights are α_f by field name; a field absent here weighs 1.
	FieldWeights map[string]float64
}

// Default is MMP §10.2's uniform profile.
func Default() Config {
	return Config{Redundant: 0.10, Aligned: 0.25, Guarded: 0.50, Lambda: 0.3, Freshness: 30 * time.Minute}
}

// Validate refuses thresholds that cannot order verdicts.
func (c Config) Validate() error {
	switch {
	case !(c.Redundant >= 0 && c.Redundant <= 1):
		return errors.New("svaf: redundant threshold must be in [0,1]")
	case !(c.Aligned >= 0 && c.Aligned <= c.Guarded && c.Guarded <= 1):
		return errors.New("svaf: thresholds must satisfy 0 ≤ aligned ≤ guarded ≤ 1")
	case !(c.Lambda >= 0 && c.Lambda <= 1):
		return errors.New("svaf: temporal lambda must be in [0,1]")
	case c.Freshness <= 0:
		return errors.New("svaf: freshness must be positive")
	}
	for f, w := range c.FieldWeights {
		if !(w >= 0) || math.IsInf(w, 0) {
			return fmt.Errorf("svaf: field weight of %s must be a finite non-negative number", f)
		}
	}
	return nil
}

func (c Config) alpha(field string) float64 {
	if w, ok := c.FieldWeights[field]; ok {
		return w
	}
	return 1
}

// Decay is exp(−age/τ), the freshness factor of an anchor aged age (a
// negative age counts as 0), computed as Evaluate computes it.
func (c Config) Decay(age time.Duration) float64 {
	return math.Exp(-max(age.Seconds(), 0) / c.Freshness.Seconds())
}

// Negligible reports whether anchors whose Decays sum to at most decay
// can never make field evaluable: an anchor's weight there is
// α_f·cosine·Decay·confidence, with the cosine at most 1 (to a few ulps)
// and, for the Negligible bound to hold, the confidence at most 1. The
// factor 2 covers every rounding of Evaluate's sums. When it holds for
// every field of the incoming record, Evaluate admits it as Aligned to
// bootstrap (Evaluable 0, no drift, no nearest) whatever the vectors, so
// a caller need not make them.
func (c Config) Negligible(field string, decay float64) bool {
	return 2*c.alpha(field)*decay < nonEvaluable
}

// Vectors are one record's per-field vectors, by field name. A field with
// no vector (absent or "neutral" text) is not evaluable.
type Vectors map[string][]float64

// Sparse is a vector of Dim given by its nonzero entries: Value[k] at
// Index[k], Index ascending.
//
// A vector of few distinct values (a hashed n-gram field's, whose values
// are its counts scaled) may instead give them coded, Value nil: entry k
// is Table[Code[k]-Lo]. A vector with Index nil is dense: Value holds all
// Dim entries, entry k at k. Evaluate reads each value where it would
// read it from a dense vector, so the sums are the same to the bit.
type Sparse struct {
	Dim   int
	Index []uint16
	Value []float64
	Code  []int16
	Lo    int16
	Table []float64
	// NN is the vector's squared norm, Σ value² over its entries in
	// order, when the caller knows it (a cached anchor's); 0: Evaluate
	// sums it. A wrong NN is a wrong verdict.
	NN float64
}

// Anchor is one prior record the incoming one is judged against.
type Anchor struct {
	Key     string
	Vectors Vectors
	// Sparse holds fields given by their nonzero entries instead (a field
	// is in one or the other). Evaluate's sums then skip exact zeros, which
	// changes none of them: every sum starts at +0 and adding ±0 to it
	// leaves it as it is, so a verdict is the same to the bit as with the
	// field dense. A hashed n-gram vector is about half zeros.
	Sparse map[string]Sparse
	// Age is how old the anchor is at evaluation time; Confidence scales
	// its weight (0 is taken as 1, MMP's default).
	Age        time.Duration
	Confidence float64
}

// Field is one of the incoming record's fields as Evaluator.Evaluate
// takes them: the record's vector and every anchor's vector of the field.
type Field struct {
	Name string
	// X is the incoming record's vector, dense; empty, the field is not
	// evaluable.
	X []float64
	// XX is X·X summed in index order when the caller knows it; 0:
	// Evaluate sums it.
	XX float64
	// Anchors[i] is anchor i's vector of the field; one of another Dim
	// than len(X) (the zero Sparse: the anchor has none) is skipped.
	Anchors []Sparse
}

// Verdict is the outcome of one evaluation.
type Verdict struct {
	Decision Decision
	// TotalDrift is (1−λ)·fieldDrift + λ·temporalDrift, in [0,1]; 0 on the
	// cold-start bootstrap.
	TotalDrift float64
	// FieldDrift is the α-weighted graded drift over evaluable fields.
	FieldDrift float64
	// MaxNearestDrift is max_f δ_f_near, the redundancy basis.
	MaxNearestDrift float64
	// Nearest is the anchor closest to the incoming record (the best mean
	// cosine over evaluable fields): what a redundant record duplicates.
	Nearest string
	// Evaluable is how many fields took part; 0 means no anchor carried a
	// comparable vector (empty memory) and the record was admitted to
	// bootstrap.
	Evaluable int
}

// nonEvaluable is the weight sum below which a field is dropped (§9.2.1).
const nonEvaluable = 1e-8

// Evaluate judges incoming, aged age, against anchors. It never compares
// vectors of different dimensions: such an anchor field is skipped. The
// incoming record must not be among the anchors (the caller's invariant).
func Evaluate(c Config, incoming Vectors, anchors []Anchor, age time.Duration) Verdict {
	names := sortedFields(incoming)
	fields := make([]Field, 0, len(names))
	of := make([]Sparse, len(names)*len(anchors))
	for _, f := range names {
		x := incoming[f]
		if len(x) == 0 {
			continue
		}
		fd := Field{Name: f, X: x, Anchors: of[:len(anchors):len(anchors)]}
		of = of[len(anchors):]
		for i, a := range anchors {
			if v := a.Vectors[f]; v != nil {
				fd.Anchors[i] = Sparse{Dim: len(v), Value: v}
			} else if sp, ok := a.Sparse[f]; ok {
				fd.Anchors[i] = sp
			}
		}
		fields = append(fields, fd)
	}
	var e Evaluator
	return e.Evaluate(c, fields, anchors, age)
}

// Evaluator is Evaluate with its working memory kept for the next
// evaluation; the zero value is ready. It is not safe for concurrent use.
type Evaluator struct {
	nearSum, decay, conf, cos, w, nn []float64
	nearN                            []int
	fused                            []float64   // one Dim per evaluable field
	evaluable                        []evaluated // ascending
}

// evaluated is an evaluable field: its index and X·X.
type evaluated struct {
	field int
	xx    float64
}

// grow returns s with length n, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Evaluate judges the incoming record, given by its fields (in ascending
// Name order, which the sums follow), aged age, against anchors: field
// f's vector of anchor i is fields[f].Anchors[i]; the anchors' own
// Vectors and Sparse are not read. It gives Evaluate's verdict for the
// same vectors, to the bit.
func (e *Evaluator) Evaluate(c Config, fields []Field, anchors []Anchor, age time.Duration) Verdict {
	n := len(anchors)
	e.nearSum, e.nearN = grow(e.nearSum, n), grow(e.nearN, n)
	clear(e.nearSum)
	clear(e.nearN)
	// An anchor's decay and confidence, the same in every field.
	e.decay, e.conf = grow(e.decay, n), grow(e.conf, n)
	e.cos, e.w, e.nn = grow(e.cos, n), grow(e.w, n), grow(e.nn, n)
	for i, a := range anchors {
		e.decay[i], e.conf[i] = c.Decay(a.Age), a.Confidence
		if e.conf[i] <= 0 {
			e.conf[i] = 1
		}
	}
	size := 0
	for _, f := range fields {
		size += len(f.X)
	}
	e.fused = grow(e.fused, size)
	e.evaluable = e.evaluable[:0]
	maxNear := 0.0
	off := 0 // where the next evaluable field's fused readout starts
	for fi := range fields {
		f := &fields[fi]
		x := f.X
		if len(x) == 0 {
			continue
		}
		alpha := c.alpha(f.Name)
		xx := f.XX
		if xx == 0 {
			for _, v := range x {
				xx += v * v
			}
		}
		e.cosines(x, xx, f.Anchors)
		var wsum float64
		bestCos := math.Inf(-1)
		for i := range anchors {
			if f.Anchors[i].Dim != len(x) {
				continue
			}
			cs := e.cos[i]
			e.nearSum[i] += cs
			e.nearN[i]++
			bestCos = max(bestCos, cs)
			w := alpha * max(cs, 0) * e.decay[i] * e.conf[i]
			e.w[i] = w
			if w == 0 {
				continue
			}
			wsum += w
		}
		if wsum < nonEvaluable {
			continue // its readout would not be read
		}
		// The readout: each anchor's vector added, weighted, in anchor
		// order, every entry summed in that order as a dense sum would.
		fused := e.fused[off : off+len(x) : off+len(x)]
		off += len(x)
		clear(fused)
		for i := range anchors {
			if sp := &f.Anchors[i]; sp.Dim == len(x) && e.w[i] != 0 {
				sp.addTo(fused, e.w[i])
			}
		}
		maxNear = max(maxNear, 1-max(bestCos, 0))
		e.evaluable = append(e.evaluable, evaluated{fi, xx})
	}
	// Each evaluable field's drift, its readout's cosine to its vector;
	// two at a time, the sums of each field in its own order.
	var sumA, sumAD float64
	off = 0
	for k := 0; k < len(e.evaluable); k++ {
		f, fxx := &fields[e.evaluable[k].field], e.evaluable[k].xx
		fused := e.fused[off : off+len(f.X)]
		off += len(f.X)
		var dot, nn float64
		if k+1 < len(e.evaluable) {
			g, gxx := &fields[e.evaluable[k+1].field], e.evaluable[k+1].xx
			if len(g.X) == len(f.X) {
				gfused := e.fused[off : off+len(g.X)]
				off += len(g.X)
				var gdot, gnn float64
				dot, nn, gdot, gnn = readout2(fused, f.X, gfused, g.X)
				d0, d1 := 1-cosineOf(dot, nn, fxx), 1-cosineOf(gdot, gnn, gxx)
				alpha := c.alpha(f.Name)
				sumA += alpha
				sumAD += alpha * d0
				alpha = c.alpha(g.Name)
				sumA += alpha
				sumAD += alpha * d1
				k++
				continue
			}
		}
		dot, nn = readout(fused, f.X)
		alpha := c.alpha(f.Name)
		sumA += alpha
		sumAD += alpha * (1 - cosineOf(dot, nn, fxx))
	}
	return c.verdict(sums{len(e.evaluable), sumA, sumAD, maxNear, e.nearSum, e.nearN}, anchors, age)
}

// sums are what an evaluation adds up before its verdict: the evaluable
// fields' count, Σα and Σα·δ, the largest nearest-anchor drift, and each
// anchor's summed cosine over the fields it was compared in and how many.
type sums struct {
	evaluable   int
	sumA, sumAD float64
	maxNear     float64
	nearSum     []float64
	nearN       []int
}

// verdict is the verdict of s, for anchors, of a record aged age.
func (c Config) verdict(s sums, anchors []Anchor, age time.Duration) Verdict {
	evaluable, sumA, sumAD, maxNear := s.evaluable, s.sumA, s.sumAD, s.maxNear
	tau := c.Freshness.Seconds()
	v := Verdict{Evaluable: evaluable}
	best := math.Inf(-1)
	for i, a := range anchors {
		if s.nearN[i] > 0 {
			if m := s.nearSum[i] / float64(s.nearN[i]); m > best {
				best, v.Nearest = m, a.Key
			}
		}
	}
	if evaluable == 0 || sumA == 0 {
		// Empty memory (or nothing comparable) admits, to bootstrap.
		v.Decision, v.Nearest = Aligned, ""
		return v
	}
	v.FieldDrift = sumAD / sumA
	v.MaxNearestDrift = maxNear
	temporal := 1 - math.Exp(-max(age.Seconds(), 0)/tau)
	v.TotalDrift = (1-c.Lambda)*v.FieldDrift + c.Lambda*temporal
	switch {
	case maxNear < c.Redundant:
		v.Decision = Redundant
	case v.TotalDrift <= c.Aligned:
		v.Decision = Aligned
	case v.TotalDrift <= c.Guarded:
		v.Decision = Guarded
	default:
		v.Decision = Rejected
	}
	return v
}

func sortedFields(v Vectors) []string {
	out := make([]string, 0, len(v))
	for f := range v {
		out = append(out, f)
	}
	// Insertion sort: seven fields at most.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// cosineOf is the cosine of two vectors from their dot product and
// squared norms: 0 if either is zero.
func cosineOf(dot, na, nb float64) float64 {
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// cosines sets e.cos[i] to the cosine of x (of squared norm xx) and
// vs[i], for each vs[i] of x's length.
func (e *Evaluator) cosines(x []float64, xx float64, vs []Sparse) {
	for i := range vs {
		v := &vs[i]
		if v.Dim != len(x) {
			continue
		}
		e.nn[i] = v.NN
		if e.nn[i] == 0 {
			e.nn[i] = v.Norm()
		}
		e.cos[i] = cosineOf(v.dot(x), xx, e.nn[i])
	}
}

// Norm is Σ value² over v's entries in order: the sum Evaluate makes of
// v·v, which NN may hold.
func (v *Sparse) Norm() float64 {
	var nn float64
	if v.Value != nil {
		for _, y := range v.Value {
			nn += y * y
		}
		return nn
	}
	code, tab, lo := v.Code[:len(v.Index)], v.Table, int(v.Lo)
	for _, c := range code {
		y := tab[int(c)-lo]
		nn += y * y
	}
	return nn
}

// dot is x·v summed over v's entries in order (x of v's Dim).
func (v *Sparse) dot(x []float64) float64 {
	var dot float64
	switch {
	case v.Index == nil:
		x = x[:len(v.Value)]
		for j, y := range v.Value {
			dot += x[j] * y
		}
	case v.Value != nil:
		val := v.Value[:len(v.Index)]
		for k, j := range v.Index {
			dot += x[j] * val[k]
		}
	default:
		code, tab, lo := v.Code[:len(v.Index)], v.Table, int(v.Lo)
		for k, j := range v.Index {
			dot += x[j] * tab[int(code[k])-lo]
		}
	}
	return dot
}

// readout is fused·x and fused·fused, each summed in index order.
func readout(fused, x []float64) (dot, nn float64) {
	x = x[:len(fused)]
	for j, a := range fused {
		dot += a * x[j]
		nn += a * a
	}
	return dot, nn
}

// readout2 is readout for two fields of one length, side by side.
func readout2(f0, x0, f1, x1 []float64) (dot0, nn0, dot1, nn1 float64) {
	x0, f1, x1 = x0[:len(f0)], f1[:len(f0)], x1[:len(f0)]
	for j, a := range f0 {
		b := f1[j]
		dot0 += a * x0[j]
		nn0 += a * a
		dot1 += b * x1[j]
		nn1 += b * b
	}
	return dot0, nn0, dot1, nn1
}

// At is entry k's value, Value[k].
func (v *Sparse) At(k int) float64 {
	if v.Value != nil {
		return v.Value[k]
	}
	return v.Table[int(v.Code[k])-int(v.Lo)]
}

// addTo adds w times v to fused (of v's Dim).
func (v *Sparse) addTo(fused []float64, w float64) {
	switch {
	case v.Index == nil:
		fused = fused[:len(v.Value)]
		for j, y := range v.Value {
			fused[j] += w * y
		}
	case v.Value != nil:
		val := v.Value[:len(v.Index)]
		for k, j := range v.Index {
			fused[j] += w * val[k]
		}
	default:
		code, tab, lo := v.Code[:len(v.Index)], v.Table, int(v.Lo)
		for k, j := range v.Index {
			fused[j] += w * tab[int(code[k])-lo]
		}
	}
}
