package node

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cmbnode/cmbnode/node/svaf"
)

// TestVerdictJSON: verdictJSON writes json.Marshal's bytes, and
// fails where it fails, for every decision, drifts of every magnitude and
// sign (exponent forms, -0, NaN, ±Inf) and strings json writes as they are
// or escapes.
func TestVerdictJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	decisions := []svaf.Decision{svaf.Aligned, svaf.Guarded, svaf.Redundant, svaf.Rejected, "", "odd\"one"}
	strs := []string{"", "hashed-ngram-512", "cmb-3f9a0c", "a<b", "x&y", "q\"", "back\\slash", "tab\t", "\x00", "é", "\u2028", "\xff", "~ }", "0123456789abcdef"}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99e-7, 1e-7, -1e-7, 1e-9, 1e-300, 5e-324,
		1e20, 1e21, -1e21, 1.5e22, math.MaxFloat64, 0.123456789, round9(1.0 / 3), math.NaN(), math.Inf(1), math.Inf(-1)}
	check := func(v verdictRecord) {
		t.Helper()
		want, werr := json.Marshal(v)
		got, gerr := verdictJSON(v)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%+v: error %v, json.Marshal's %v", v, gerr, werr)
		}
		if werr != nil {
			if gerr.Error() != werr.Error() {
				t.Fatalf("%+v: error %q, json.Marshal's %q", v, gerr, werr)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s\nwant %s", v, got, want)
		}
		if v.Decision.Valid() && plainJSON(v.Nearest) && plainJSON(v.Kernel) {
			var back verdictRecord
			if err := json.Unmarshal(got, &back); err != nil || back != v {
				t.Fatalf("%s reads back as %+v, %v", got, back, err)
			}
		}
	}
	for _, d := range decisions {
		for _, f := range floats {
			for _, s := range strs {
				check(verdictRecord{Decision: d, Drift: f, Nearest: s, Kernel: "k", At: 1})
				check(verdictRecord{Decision: d, Drift: f, Kernel: s, At: -1})
			}
		}
	}
	for range 200000 {
		var f float64
		switch r.IntN(4) {
		case 0:
			f = round9(r.Float64())
		case 1:
			f = math.Float64frombits(r.Uint64())
		case 2:
			f = (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(60)-30))
		default:
			f = float64(r.IntN(2000)-1000) / 1e9
		}
		v := verdictRecord{Decision: decisions[r.IntN(4)], Drift: f, Kernel: strs[r.IntN(len(strs))], At: r.Int64() - math.MaxInt64/2}
		if r.IntN(2) == 0 {
			v.Nearest = strs[r.IntN(len(strs))]
		}
		check(v)
	}
}

// BenchmarkVerdictAnnex: a redundant verdict's annex, as judge makes it.
func BenchmarkVerdictAnnex(b *testing.B) {
	v := verdictRecord{Decision: svaf.Redundant, Drift: 0.123456789, Nearest: "cmb-0123456789abcdef0123456789abcdef", Kernel: "hashed-ngram-v1-512", At: 1764690000000}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := verdictAnnex(v); err != nil {
			b.Fatal(err)
		}
	}
}
