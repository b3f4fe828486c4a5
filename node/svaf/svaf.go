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
// is Table[Code[k]-Lo]. Evaluate reads each value from the table where it
// would read it from Value, so the sums are the same to the bit.
type Sparse struct {
	Dim   int
	Index []uint16
	Value []float64
	Code  []int16
	Lo    int16
	Table []float64
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
	tau := c.Freshness.Seconds()
	var sumA, sumAD float64
	maxNear := 0.0
	evaluable := 0
	nearSum := make([]float64, len(anchors))
	nearN := make([]int, len(anchors))
	// An anchor's decay and confidence, the same in every field.
	decay, conf := make([]float64, len(anchors)), make([]float64, len(anchors))
	for i, a := range anchors {
		decay[i], conf[i] = c.Decay(a.Age), a.Confidence
		if conf[i] <= 0 {
			conf[i] = 1
		}
	}
	var fused []float64
	// Fields in a fixed order, so sums round the same way on every run.
	for _, f := range sortedFields(incoming) {
		x := incoming[f]
		if len(x) == 0 {
			continue
		}
		alpha := c.alpha(f)
		if cap(fused) < len(x) {
			fused = make([]float64, len(x))
		}
		fused = fused[:len(x)]
		clear(fused)
		var wsum float64
		bestCos := math.Inf(-1)
		xx := -1.0 // x·x, cosine's na, once a sparse field needs it
		for i, a := range anchors {
			v := a.Vectors[f]
			sp, sparse := a.Sparse[f]
			sparse = sparse && v == nil
			if (sparse && sp.Dim != len(x)) || (!sparse && len(v) != len(x)) {
				continue
			}
			var cs float64
			if sparse {
				if xx < 0 {
					xx = 0
					for _, e := range x {
						xx += e * e
					}
				}
				cs = sparseCosine(x, xx, sp)
			} else {
				cs = cosine(x, v)
			}
			nearSum[i] += cs
			nearN[i]++
			bestCos = max(bestCos, cs)
			w := alpha * max(cs, 0) * decay[i] * conf[i]
			if w == 0 {
				continue
			}
			wsum += w
			if sparse {
				sp.addTo(fused, w)
				continue
			}
			for j := range fused {
				fused[j] += w * v[j]
			}
		}
		if wsum < nonEvaluable {
			continue
		}
		evaluable++
		delta := 1 - cosine(fused, x)
		near := 1 - max(bestCos, 0)
		maxNear = max(maxNear, near)
		sumA += alpha
		sumAD += alpha * delta
	}
	v := Verdict{Evaluable: evaluable}
	best := math.Inf(-1)
	for i, a := range anchors {
		if nearN[i] > 0 {
			if m := nearSum[i] / float64(nearN[i]); m > best {
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

// sparseCosine is cosine(x, v) for v given sparse (of x's length), with
// na = x·x summed in index order: the same sums, less the zero terms.
func sparseCosine(x []float64, na float64, v Sparse) float64 {
	var dot, nb float64
	if v.Value != nil {
		for k, j := range v.Index {
			y := v.Value[k]
			dot += x[j] * y
			nb += y * y
		}
	} else {
		code, tab, lo := v.Code[:len(v.Index)], v.Table, int(v.Lo)
		for k, j := range v.Index {
			y := tab[int(code[k])-lo]
			dot += x[j] * y
			nb += y * y
		}
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
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
	if v.Value != nil {
		for k, j := range v.Index {
			fused[j] += w * v.Value[k]
		}
		return
	}
	code, tab, lo := v.Code[:len(v.Index)], v.Table, int(v.Lo)
	for k, j := range v.Index {
		fused[j] += w * tab[int(code[k])-lo]
	}
}

// cosine is the cosine of two equal-length vectors; 0 if either is zero.
func cosine(a, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		x, y := a[i], b[i]
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
