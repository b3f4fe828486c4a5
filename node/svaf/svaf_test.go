package svaf

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// The published conformance vectors, copied into the repository.
const baselinePath = "../../fixtures/mmp/svaf-baseline.json"

type baselineCase struct {
	Label      string               `json:"label"`
	Incoming   map[string][]float64 `json:"incoming"`
	Anchors    []map[string][]float64
	AgeSeconds float64 `json:"ageSeconds"`
	Config     struct {
		StableThreshold  float64            `json:"stableThreshold"`
		GuardedThreshold float64            `json:"guardedThreshold"`
		TemporalLambda   float64            `json:"temporalLambda"`
		FreshnessSeconds float64            `json:"freshnessSeconds"`
		FieldWeights     map[string]float64 `json:"fieldWeights"`
	} `json:"config"`
	Expected struct {
		Accepted        bool     `json:"accepted"`
		Decision        string   `json:"decision"`
		TotalDrift      float64  `json:"totalDrift"`
		MaxNearestDrift *float64 `json:"maxNearestDrift"`
	} `json:"expected"`
}

func round9(x float64) float64 { return math.Round(x*1e9) / 1e9 }

// TestBaselineVectors reproduces every case of svaf-baseline.json: the
// decision, whether it admits, and the drifts as published (9 decimals;
// the file truncates 0.65 − ε to 0.649999999, so agreement is within 1e-9).
func TestBaselineVectors(t *testing.T) {
	b, err := os.ReadFile(baselinePath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Cases []baselineCase }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) != 7 {
		t.Fatalf("%d cases, want the 7 published", len(file.Cases))
	}
	for _, tc := range file.Cases {
		t.Run(tc.Label, func(t *testing.T) {
			c := Default()
			c.Aligned, c.Guarded = tc.Config.StableThreshold, tc.Config.GuardedThreshold
			c.Lambda = tc.Config.TemporalLambda
			c.Freshness = time.Duration(tc.Config.FreshnessSeconds * float64(time.Second))
			c.FieldWeights = tc.Config.FieldWeights
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			var anchors []Anchor
			for i, a := range tc.Anchors {
				anchors = append(anchors, Anchor{Key: string(rune('a' + i)), Vectors: a})
			}
			v := Evaluate(c, tc.Incoming, anchors, time.Duration(tc.AgeSeconds*float64(time.Second)))
			if string(v.Decision) != tc.Expected.Decision {
				t.Errorf("decision %s, want %s (%+v)", v.Decision, tc.Expected.Decision, v)
			}
			if v.Decision.Admitted() != tc.Expected.Accepted {
				t.Errorf("admitted %t, want %t", v.Decision.Admitted(), tc.Expected.Accepted)
			}
			if d := math.Abs(v.TotalDrift - tc.Expected.TotalDrift); d > 1.5e-9 {
				t.Errorf("totalDrift %.12f, want %.9f", v.TotalDrift, tc.Expected.TotalDrift)
			}
			if m := tc.Expected.MaxNearestDrift; m != nil && math.Abs(v.MaxNearestDrift-*m) > 1e-9 {
				t.Errorf("maxNearestDrift %.12f, want %.9f", v.MaxNearestDrift, *m)
			}
		})
	}
}

// TestNearestAndDimensions: the redundant verdict names the anchor it
// duplicates, and an anchor of another dimension is never compared.
func TestNearestAndDimensions(t *testing.T) {
	in := Vectors{"focus": {1, 0}}
	v := Evaluate(Default(), in, []Anchor{
		{Key: "far", Vectors: Vectors{"focus": {0, 1}}},
		{Key: "same", Vectors: Vectors{"focus": {2, 0}}},
		{Key: "other-kernel", Vectors: Vectors{"focus": {1, 0, 0}}},
	}, 0)
	if v.Decision != Redundant || v.Nearest != "same" {
		t.Fatalf("got %+v, want redundant of same", v)
	}
	v = Evaluate(Default(), in, []Anchor{{Key: "x", Vectors: Vectors{"focus": {1, 0, 0}}}}, 0)
	if v.Decision != Aligned || v.Evaluable != 0 {
		t.Fatalf("only an incomparable anchor: got %+v, want the bootstrap admission", v)
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	c.Aligned, c.Guarded = 0.6, 0.5
	if c.Validate() == nil {
		t.Fatal("aligned above guarded accepted")
	}
	c = Default()
	c.Freshness = 0
	if c.Validate() == nil {
		t.Fatal("zero freshness accepted")
	}
	if _, err := ParseDecision("admitted"); err == nil {
		t.Fatal(`"admitted" parsed as a decision`)
	}
}

// TestSparseAnchors: anchors given sparse get, to the bit, the verdict of
// the same anchors given dense, with fields half zeros, some of another
// dimension, some all zero, and dense and sparse fields mixed.
func TestSparseAnchors(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	vec := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			if r.IntN(2) == 0 {
				v[i] = r.NormFloat64()
			}
		}
		return v
	}
	sparse := func(v []float64) Sparse {
		s := Sparse{Dim: len(v)}
		for i, x := range v {
			if x != 0 {
				s.Index, s.Value = append(s.Index, uint16(i)), append(s.Value, x)
			}
		}
		if r.IntN(2) == 0 { // coded: each value through the table
			s.Lo = int16(r.IntN(9) - 4)
			s.Table, s.Value = s.Value, nil
			for k := range s.Index {
				s.Code = append(s.Code, int16(k)+s.Lo)
			}
		}
		return s
	}
	names := []string{"focus", "issue", "mood"}
	seen := map[Decision]int{}
	for trial := range 300 {
		in := Vectors{}
		for _, f := range names {
			if r.IntN(4) > 0 {
				in[f] = vec(48)
			}
		}
		var dense, mixed []Anchor
		for i := range r.IntN(12) {
			a := Anchor{Key: fmt.Sprint(i), Vectors: Vectors{}, Age: time.Duration(r.IntN(3600)) * time.Second}
			b := Anchor{Key: a.Key, Vectors: Vectors{}, Sparse: map[string]Sparse{}, Age: a.Age}
			for _, f := range names {
				var v []float64
				switch r.IntN(6) {
				case 0:
					continue
				case 1:
					v = vec(24)
				case 2:
					v = make([]float64, 48)
				case 3:
					v = append([]float64(nil), in[f]...) // a near-copy, when the field is there
					if len(v) > 0 {
						v[0] += 1e-3
					}
				default:
					v = vec(48)
				}
				a.Vectors[f] = v
				if r.IntN(3) > 0 {
					b.Sparse[f] = sparse(v)
				} else {
					b.Vectors[f] = v
				}
			}
			dense, mixed = append(dense, a), append(mixed, b)
		}
		age := time.Duration(r.IntN(7200)) * time.Second
		want := Evaluate(Default(), in, dense, age)
		got := Evaluate(Default(), in, mixed, age)
		if !sameVerdict(got, want) {
			t.Fatalf("trial %d: sparse %+v, dense %+v", trial, got, want)
		}
		seen[want.Decision]++
	}
	if len(seen) < 3 {
		t.Fatalf("verdicts reached %v: the cases do not exercise the thresholds", seen)
	}
}

// TestNegligible: anchors whose decays Negligible holds for admit the
// incoming record to bootstrap whatever their vectors, copies of it
// included; anchors just fresh enough to weigh make it evaluable.
func TestNegligible(t *testing.T) {
	c := Default()
	c.FieldWeights = map[string]float64{"focus": 3}
	rng := rand.New(rand.NewPCG(3, 4))
	vec := func() []float64 {
		v := make([]float64, 16)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return v
	}
	in := Vectors{"focus": vec(), "issue": vec()}
	judge := func(age time.Duration) (Verdict, bool) {
		var anchors []Anchor
		decay := 0.0
		for i := range 10 {
			a := Anchor{Key: fmt.Sprint(i), Age: age + time.Duration(i)*time.Second, Vectors: Vectors{"focus": vec(), "issue": vec()}}
			if i%3 == 0 { // an exact copy: cosine 1
				a.Vectors = Vectors{"focus": in["focus"], "issue": in["issue"]}
			}
			anchors = append(anchors, a)
			decay += c.Decay(a.Age)
		}
		return Evaluate(c, in, anchors, age), c.Negligible("focus", decay) && c.Negligible("issue", decay)
	}
	// exp(−age/τ) of 1e-8 is at about 18.4 τ; ten anchors, twice, of
	// weight 3 need about 22.5 τ.
	for _, age := range []time.Duration{23 * c.Freshness, 40 * c.Freshness, 1000 * c.Freshness, 1e6 * time.Hour} {
		v, neg := judge(age)
		if !neg {
			t.Fatalf("age %v: not negligible", age)
		}
		if v.Decision != Aligned || v.Evaluable != 0 || v.TotalDrift != 0 || v.Nearest != "" {
			t.Fatalf("age %v, negligible: %+v", age, v)
		}
	}
	for _, age := range []time.Duration{time.Minute, 17 * c.Freshness} {
		v, neg := judge(age)
		if neg {
			t.Fatalf("age %v: negligible", age)
		}
		if v.Evaluable == 0 {
			t.Fatalf("age %v: nothing evaluable: %+v", age, v)
		}
	}
}

// referenceEvaluate is Evaluate as it was before sparse vectors and the
// Evaluator (the code the conformance vectors were first reproduced
// with): every vector dense, every sum over all entries in index order.
func referenceEvaluate(c Config, incoming Vectors, anchors []Anchor, age time.Duration) Verdict {
	cosine := func(a, b []float64) float64 {
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
	var sumA, sumAD float64
	maxNear := 0.0
	evaluable := 0
	nearSum := make([]float64, len(anchors))
	nearN := make([]int, len(anchors))
	for _, f := range sortedFields(incoming) {
		x := incoming[f]
		if len(x) == 0 {
			continue
		}
		alpha := c.alpha(f)
		fused := make([]float64, len(x))
		var wsum float64
		bestCos := math.Inf(-1)
		for i, a := range anchors {
			v := a.Vectors[f]
			if len(v) != len(x) {
				continue
			}
			cs := cosine(x, v)
			nearSum[i] += cs
			nearN[i]++
			bestCos = max(bestCos, cs)
			conf := a.Confidence
			if conf <= 0 {
				conf = 1
			}
			w := alpha * max(cs, 0) * c.Decay(a.Age) * conf
			if w == 0 {
				continue
			}
			wsum += w
			for j := range fused {
				fused[j] += w * v[j]
			}
		}
		if wsum < nonEvaluable {
			continue
		}
		evaluable++
		delta := 1 - cosine(fused, x)
		maxNear = max(maxNear, 1-max(bestCos, 0))
		sumA += alpha
		sumAD += alpha * delta
	}
	return c.verdict(sums{evaluable, sumA, sumAD, maxNear, nearSum, nearN}, anchors, age)
}

// sameVerdict reports whether a and b are the same verdict to the bit.
func sameVerdict(a, b Verdict) bool {
	same := a.Decision == b.Decision && a.Nearest == b.Nearest && a.Evaluable == b.Evaluable
	for _, p := range [][2]float64{{a.TotalDrift, b.TotalDrift}, {a.FieldDrift, b.FieldDrift}, {a.MaxNearestDrift, b.MaxNearestDrift}} {
		same = same && math.Float64bits(p[0]) == math.Float64bits(p[1])
	}
	return same
}

// TestEvaluatorMatchesReference: one Evaluator, reused, given fields of
// coded sparse anchors (the hashed kernel's form: few distinct values,
// summed four anchors side by side), sparse and dense ones, norms given
// or left to it, reaches referenceEvaluate's verdict to the bit, and so
// does Evaluate on the same vectors as maps.
func TestEvaluatorMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const dim = 64
	// A vector of small counts scaled to unit length in float32, as the
	// hashed kernel makes them, about half zeros.
	counts := func() []float64 {
		c := make([]int, dim)
		ss := 0
		for i := range c {
			if r.IntN(2) == 0 {
				c[i] = r.IntN(7) - 3
				ss += c[i] * c[i]
			}
		}
		v := make([]float64, dim)
		if ss == 0 {
			return v
		}
		inv := 1 / math.Sqrt(float64(ss))
		for i, x := range c {
			v[i] = float64(float32(float64(x) * inv))
		}
		return v
	}
	coded := func(v []float64) Sparse {
		s := Sparse{Dim: len(v), Lo: int16(r.IntN(7) - 3)}
		for j, y := range v {
			if y != 0 { // entry k's value is the table's slot Code[k]-Lo
				s.Index, s.Code = append(s.Index, uint16(j)), append(s.Code, int16(len(s.Table))+s.Lo)
				s.Table = append(s.Table, y)
			}
		}
		if r.IntN(2) == 0 {
			s.NN = s.Norm()
		}
		return s
	}
	names := []string{"focus", "intent", "issue", "mood"}
	var e Evaluator
	seen := map[Decision]int{}
	for trial := range 400 {
		in := Vectors{}
		for _, f := range names {
			if r.IntN(5) > 0 {
				in[f] = counts()
			}
		}
		var ref []Anchor
		n := r.IntN(14)
		of := map[string][]Sparse{}
		for i := range n {
			a := Anchor{Key: fmt.Sprint(i), Vectors: Vectors{}, Age: time.Duration(r.IntN(5400)) * time.Second}
			if r.IntN(4) == 0 {
				a.Confidence = r.Float64()
			}
			for _, f := range names {
				var v []float64
				var sp Sparse
				switch r.IntN(8) {
				case 0: // none
				case 1: // another dimension
					v = counts()[:dim/2]
					sp = Sparse{Dim: len(v), Value: v}
				case 2: // a near-copy
					if x := in[f]; x != nil {
						v = append([]float64(nil), x...)
						v[r.IntN(dim)] = 0
						sp = coded(v)
					}
				case 3: // dense
					v = counts()
					sp = Sparse{Dim: dim, Value: v}
				default:
					v = counts()
					sp = coded(v)
				}
				if v != nil {
					a.Vectors[f] = v
				}
				of[f] = append(of[f], sp)
			}
			ref = append(ref, a)
		}
		var fields []Field
		for _, f := range sortedFields(in) {
			fd := Field{Name: f, X: in[f], Anchors: of[f]}
			if r.IntN(2) == 0 {
				for _, y := range fd.X {
					fd.XX += y * y
				}
			}
			fields = append(fields, fd)
		}
		c := Default()
		if trial%3 == 0 {
			c.FieldWeights = map[string]float64{"focus": 2, "mood": 0}
		}
		age := time.Duration(r.IntN(7200)) * time.Second
		want := referenceEvaluate(c, in, ref, age)
		for _, got := range []Verdict{e.Evaluate(c, fields, ref, age), Evaluate(c, in, ref, age)} {
			if !sameVerdict(got, want) {
				t.Fatalf("trial %d: got %+v, reference %+v", trial, got, want)
			}
		}
		seen[want.Decision]++
	}
	if len(seen) < 4 {
		t.Fatalf("verdicts reached %v: the cases do not reach all four", seen)
	}
}

// BenchmarkEvaluator is one evaluation of the hashed kernel's standard
// shape: seven 512-dimension fields, ten coded anchors of about 114
// nonzero buckets a field (a standard 300-byte field's), norms known.
func BenchmarkEvaluator(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	const dim, nz, anchors = 512, 114, 10
	coded := func() Sparse {
		s := Sparse{Dim: dim, Lo: -4}
		for k := -4; k <= 4; k++ {
			s.Table = append(s.Table, float64(float32(float64(k)/12)))
		}
		for j := range dim {
			if r.IntN(dim) < nz {
				c := int16(r.IntN(9) - 4)
				if c == 0 {
					c = 1
				}
				s.Index, s.Code = append(s.Index, uint16(j)), append(s.Code, c)
			}
		}
		s.NN = s.Norm()
		return s
	}
	names := []string{"commitment", "focus", "intent", "issue", "mood", "motivation", "perspective"}
	var fields []Field
	var as []Anchor
	for i := range anchors {
		as = append(as, Anchor{Key: fmt.Sprint(i), Age: time.Duration(i) * time.Minute})
	}
	for _, name := range names {
		x := make([]float64, dim)
		in := coded()
		for k, j := range in.Index {
			x[j] = in.At(k)
		}
		f := Field{Name: name, X: x, XX: in.NN}
		for range anchors {
			f.Anchors = append(f.Anchors, coded())
		}
		fields = append(fields, f)
	}
	c := Default()
	var e Evaluator
	b.ReportAllocs()
	for b.Loop() {
		e.Evaluate(c, fields, as, time.Minute)
	}
}
