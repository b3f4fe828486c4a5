package svaf

import (
	"encoding/json"
	"math"
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
