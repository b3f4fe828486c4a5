package node

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/svaf"
)

// TestHashedRecordVectors: the cached counts expand, bit for bit, to the
// hashed kernel's float32 vectors widened to float64 (what SVAF judged
// with before counts were cached), fields with no word or "neutral" left
// out, the rest in name order; coded but for a field whose counts span
// more than the table, and dense for a count too large for an int16; each
// with its squared norm summed as SVAF sums it.
func TestHashedRecordVectors(t *testing.T) {
	h := embed.DefaultHashed()
	byName := map[string]string{
		"focus":       "Shipping the release: v2.3 on Friday, QA sign-off pending.",
		"issue":       "Ünïcode straße — 東京 and emoji 🚀 mixed with ASCII",
		"intent":      "...  ,,, !!!", // no word
		"motivation":  strings.Repeat("a ", 40000),
		"commitment":  " Neutral ",
		"mood":        "x",
		"perspective": strings.Repeat("ab ", 70) + "cd", // a count past the table
	}
	var texts [cmb.NumFields]string
	for i, name := range cmb.FieldNames {
		texts[i] = byName[name]
	}
	sc := newHashScratch(h.Dim)
	for round := range 2 { // the scratch serves the next record as well
		hr := hashFields(h, &texts, sc, nil)
		var names []string
		for _, f := range hr {
			names = append(names, cmb.FieldNames[f.field])
		}
		if got := strings.Join(names, " "); got != "focus issue mood motivation perspective" {
			t.Fatalf("round %d: fields %q, want the five with words, in name order", round, got)
		}
		for _, f := range hr {
			name := cmb.FieldNames[f.field]
			want := h.Vector(strings.TrimSpace(byName[name]))
			got := make([]float64, h.Dim)
			for i := range got {
				got[i] = math.NaN() // every value must be written
			}
			f.dense(got)
			var nn float64
			for i, w := range want {
				if math.Float64bits(got[i]) != math.Float64bits(float64(w)) {
					t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], w)
				}
				nn += got[i] * got[i]
			}
			if math.Float64bits(f.vec.NN) != math.Float64bits(nn) {
				t.Errorf("%s: NN %v, the dense sum %v", name, f.vec.NN, nn)
			}
			wide, dense := f.inv != 0 && f.c32 == nil, f.c32 != nil
			if dense != (name == "motivation") || wide != (name == "perspective") {
				t.Errorf("%s: int32 counts %t, past the table %t", name, dense, wide)
			}
			// As SVAF reads it: the same values, sparse in bucket order.
			buf := make([]float64, f.values()+1)
			v, rest := f.sparse(buf)
			if len(rest) != 1 {
				t.Fatalf("%s: %d values made, want %d", name, len(buf)-len(rest), f.values())
			}
			if coded := v.Value == nil; coded != (f.inv == 0) || (v.Index == nil) != dense {
				t.Errorf("%s: coded %t, dense %t", name, coded, v.Index == nil)
			}
			for k := range max(len(v.Index), len(v.Value)) {
				j := k
				if v.Index != nil {
					j = int(v.Index[k])
					if v.At(k) == 0 || k > 0 && v.Index[k] <= v.Index[k-1] {
						t.Fatalf("%s: entry %d (bucket %d) is zero or out of order", name, k, j)
					}
				}
				if math.Float64bits(v.At(k)) != math.Float64bits(got[j]) {
					t.Fatalf("%s: entry %d (bucket %d) is %v, want %v", name, k, j, v.At(k), got[j])
				}
			}
		}
	}
}

// TestHashedJudgeMatchesDense: a judgement from cached counts reaches, to
// the bit, the verdict of svaf.Evaluate on the hashed kernel's vectors
// made dense the plain way (embed.Hashed.Vector, widened), for records
// with fields missing, near-copies, another vocabulary and anchors that
// lack the record's fields, with one working memory reused throughout.
func TestHashedJudgeMatchesDense(t *testing.T) {
	h := embed.DefaultHashed()
	recs := standardFields(40)
	texts := make([][cmb.NumFields]string, len(recs))
	for i := range recs {
		texts[i] = recs[i].Texts()
		switch i % 5 {
		case 1:
			texts[i][i%cmb.NumFields] = "" // a field missing
		case 2:
			texts[i] = texts[i-1] // a near-copy
			texts[i][3] += " and one more"
		case 3:
			texts[i][0], texts[i][6] = "neutral", "Ünïcödé 東京"
		case 4: // another vocabulary
			for f := range texts[i] {
				texts[i][f] = strings.Repeat(fmt.Sprintf("zq%dxv wy%dkj ", i, f), 20)
			}
		}
		if i%4 == 0 { // counts past the table
			texts[i][5] = strings.Repeat("ab ", 70+i) + texts[i][5]
		}
		if i%9 == 0 { // counts past an int16
			texts[i][3] = strings.Repeat("a ", 33000+i) + texts[i][3]
		}
	}
	dense := func(tx *[cmb.NumFields]string) svaf.Vectors {
		out := svaf.Vectors{}
		for i, name := range cmb.FieldNames {
			if s, ok := evaluableText(tx[i]); ok {
				if v := h.Vector(s); embed.Dot(v, v) != 0 {
					out[name] = to64(v)
				}
			}
		}
		return out
	}
	c := svaf.Default()
	w := &hashedWork{sc: newHashScratch(h.Dim)}
	seen := map[svaf.Decision]int{}
	for i := 10; i < len(texts); i++ {
		hin := hashFields(h, &texts[i], w.sc, nil)
		var anchors []svaf.Anchor
		w.hrs = w.hrs[:0]
		for k := range 1 + i%12 {
			j := (i*7 + k*5) % i
			if k == 0 && i%5 == 2 {
				j = i - 1 // the record it nearly copies
			}
			anchors = append(anchors, svaf.Anchor{Key: fmt.Sprint(j), Age: time.Duration(k*(i%4)) * 7 * time.Minute, Vectors: dense(&texts[j])})
			w.hrs = append(w.hrs, hashFields(h, &texts[j], w.sc, nil))
		}
		age := time.Duration(i%3) * 45 * time.Minute
		want := svaf.Evaluate(c, dense(&texts[i]), anchors, age)
		got := w.judge(c, hin, anchors, age)
		if got.Decision != want.Decision || got.Nearest != want.Nearest || got.Evaluable != want.Evaluable ||
			math.Float64bits(got.TotalDrift) != math.Float64bits(want.TotalDrift) ||
			math.Float64bits(got.FieldDrift) != math.Float64bits(want.FieldDrift) ||
			math.Float64bits(got.MaxNearestDrift) != math.Float64bits(want.MaxNearestDrift) {
			t.Fatalf("record %d: from counts %+v, dense %+v", i, got, want)
		}
		seen[want.Decision]++
	}
	if len(seen) < 4 {
		t.Fatalf("verdicts %v: the records do not reach all four", seen)
	}
}

// TestHashFieldsSigns: counting a record's fields with a signer gives the
// counts made without one and the signature nearSignature makes, for
// standard records and for one of every kind of field.
func TestHashFieldsSigns(t *testing.T) {
	h := embed.DefaultHashed()
	recs := standardTexts(8)
	var odd [cmb.NumFields]string
	for i, s := range []string{"Ünïcode straße — 東京 🚀 ASCII", "...  ,,, !!!", " Neutral ", "x", strings.Repeat("ab ", 70) + "cd", "", "Shipping v2.3 on Friday."} {
		odd[i] = s
	}
	var none [cmb.NumFields]string
	none[2] = " ;; "
	recs = append(recs, odd, none)
	sc := newHashScratch(h.Dim)
	for i := range recs {
		want := hashFields(h, &recs[i], sc, nil)
		var ns nearSigner
		ns.init()
		got := hashFields(h, &recs[i], sc, &ns)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d: counts differ with a signer", i)
		}
		sig, ok := ns.finish()
		wantSig, wantOK, _ := nearSignature(h, &recs[i], nil)
		if sig != wantSig || ok != wantOK {
			t.Errorf("record %d: signature %v %x, want %v %x", i, ok, sig[:4], wantOK, wantSig[:4])
		}
	}
}
