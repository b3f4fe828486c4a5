package lineage

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/cmbnode/cmbnode/store"
)

type tetherVectors struct {
	DriftCases []struct {
		Label        string                                `json:"label"`
		RemixFields  map[string]struct{ Vector []float64 } `json:"remixFields"`
		AnchorFields map[string]struct{ Vector []float64 } `json:"anchorFields"`
		FieldWeights map[string]float64                    `json:"fieldWeights"`
		Expected     struct {
			Checked  bool     `json:"checked"`
			Tethered bool     `json:"tethered"`
			Drift    *float64 `json:"drift"`
		} `json:"expected"`
	} `json:"driftCases"`
	Attestation struct {
		Record        Attestation `json:"record"`
		PayloadHex    string      `json:"payloadHex"`
		ExpectedSig   string      `json:"expectedSig"`
		SigAlg        string      `json:"sigAlg"`
		Comparability []struct {
			A, B       string
			Comparable bool
		} `json:"comparability"`
	} `json:"attestation"`
}

func loadTether(t *testing.T) tetherVectors {
	t.Helper()
	raw, err := os.ReadFile("../fixtures/mmp/tether-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var v tetherVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func testKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x42}, 32))
}

func fieldIndex(t *testing.T, name string) int {
	for i, n := range store.FieldNames() {
		if n == name {
			return i
		}
	}
	t.Fatalf("unknown field %q", name)
	return -1
}

func TestTetherAttestationVector(t *testing.T) {
	v := loadTether(t).Attestation
	p, err := v.Record.Payload()
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(p) != v.PayloadHex {
		t.Fatalf("payload\n got %q\nwant %s", p, v.PayloadHex)
	}
	signed, err := v.Record.Sign(testKey())
	if err != nil {
		t.Fatal(err)
	}
	if signed.Sig != v.ExpectedSig || signed.SigAlg != v.SigAlg {
		t.Fatalf("sig %s (%s), want %s", signed.Sig, signed.SigAlg, v.ExpectedSig)
	}
	pub := testKey().Public().(ed25519.PublicKey)
	if err := signed.Verify(pub); err != nil {
		t.Fatal(err)
	}
	// Any change to a signed member must break verification.
	for name, mutate := range map[string]func(*Attestation){
		"drift":    func(a *Attestation) { a.Drift = 0.752349 },
		"verdict":  func(a *Attestation) { a.Verdict = Tethered },
		"at":       func(a *Attestation) { a.At++ },
		"kernelId": func(a *Attestation) { a.KernelID = "ngram-h32" },
		"anchor":   func(a *Attestation) { a.Anchor = "cmb1-other" },
	} {
		bad := signed
		mutate(&bad)
		if err := bad.Verify(pub); !errors.Is(err, ErrBadAttestation) {
			t.Errorf("%s changed, Verify = %v", name, err)
		}
	}
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)).Public().(ed25519.PublicKey)
	if err := signed.Verify(other); !errors.Is(err, ErrBadAttestation) {
		t.Fatalf("wrong key verified: %v", err)
	}
	for _, c := range v.Comparability {
		if Comparable(c.A, c.B) != c.Comparable {
			t.Errorf("Comparable(%s, %s) != %v", c.A, c.B, c.Comparable)
		}
	}
	// The JSON shape round-trips with the schema's member names.
	j, _ := json.Marshal(signed)
	var back Attestation
	if err := json.Unmarshal(j, &back); err != nil || back != signed {
		t.Fatalf("json round trip: %s", j)
	}
}

func TestFixed6RoundsLikeJS(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0.0078125, "0.007813"}, // exact tie: JS rounds up, strconv to even
		{0.752348, "0.752348"},
		{0.2, "0.200000"},
		{0.9, "0.900000"},
		{0, "0.000000"},
		{1, "1.000000"},
		// Expected values checked with node's toFixed(6).
		{1.0000005, "1.000001"}, // binary value is just above the tie
		{0.0000005, "0.000000"}, // just below
		{-1e-7, "-0.000000"},
		{2.5e-7, "0.000000"},
		{-0.0078125, "-0.007813"},
		{123.4567891, "123.456789"},
		{math.NaN(), "NaN"},
	} {
		if got := Fixed6(c.in); got != c.want {
			t.Errorf("Fixed6(%v) = %s, want %s", c.in, got, c.want)
		}
	}
	if strconv.FormatFloat(0.0078125, 'f', 6, 64) != "0.007812" {
		t.Log("strconv no longer rounds half to even; Fixed6 is still right")
	}
	if _, err := (Attestation{Drift: math.Inf(1), Verdict: Severed}).Sign(testKey()); err == nil {
		t.Fatal("signed an infinite drift")
	}
}

func TestDriftCases(t *testing.T) {
	for _, c := range loadTether(t).DriftCases {
		var remix, anchor [store.NumFields][]float64
		for name, f := range c.RemixFields {
			remix[fieldIndex(t, name)] = f.Vector
		}
		for name, f := range c.AnchorFields {
			anchor[fieldIndex(t, name)] = f.Vector
		}
		var alpha *[store.NumFields]float64
		if c.FieldWeights != nil {
			alpha = &[store.NumFields]float64{1, 1, 1, 1, 1, 1, 1}
			for name, w := range c.FieldWeights {
				alpha[fieldIndex(t, name)] = w
			}
		}
		got := Drift(remix, anchor, alpha)
		if got.Checked != c.Expected.Checked || got.Tethered != c.Expected.Tethered {
			t.Errorf("%s: got %+v, want %+v", c.Label, got, c.Expected)
			continue
		}
		if c.Expected.Drift == nil {
			continue
		}
		if math.Abs(got.Drift-*c.Expected.Drift) > 1e-9 {
			t.Errorf("%s: drift %v, want %v", c.Label, got.Drift, *c.Expected.Drift)
		}
		want := Tethered
		if !c.Expected.Tethered {
			want = Severed
		}
		if got.Verdict() != want {
			t.Errorf("%s: verdict %s", c.Label, got.Verdict())
		}
	}
	// The boundary: exactly T_guarded stays tethered.
	d := Drift([store.NumFields][]float64{{0, 1}}, [store.NumFields][]float64{{1, 1}}, nil)
	if math.Abs(d.Drift-(1-1/math.Sqrt2)) > 1e-12 || !d.Tethered {
		t.Fatalf("boundary case %+v", d)
	}
}
