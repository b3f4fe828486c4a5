package lineage

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// Tether verdicts (§15.8).
const (
	Tethered = "tethered"
	Severed  = "severed"
)

// SeverThreshold is T_guarded: drift above it severs the lineage.
const SeverThreshold = 0.5

// Attestation is the §15.8 tether attestation carried as cmb.tether.
type Attestation struct {
	Of       string  `json:"of"`
	Anchor   string  `json:"anchor"`
	KernelID string  `json:"kernelId"`
	Drift    float64 `json:"drift"`
	Verdict  string  `json:"verdict"`
	By       string  `json:"by"`
	At       int64   `json:"at"`
	Sig      string  `json:"sig,omitempty"`
	SigAlg   string  `json:"sigAlg,omitempty"`
}

// ErrBadAttestation marks an attestation that must be discarded.
var ErrBadAttestation = errors.New("bad tether attestation")

// Payload is the mmp-tether-v1 byte string the signature covers.
func (a Attestation) Payload() ([]byte, error) {
	if math.IsNaN(a.Drift) || math.IsInf(a.Drift, 0) {
		return nil, fmt.Errorf("%w: drift %v is not a finite number", ErrBadAttestation, a.Drift)
	}
	b := []byte("mmp-tether-v1\n")
	b = cmb.AppendLP(b, a.Of)
	b = cmb.AppendLP(b, a.Anchor)
	b = cmb.AppendLP(b, a.KernelID)
	b = cmb.AppendLP(b, Fixed6(a.Drift))
	b = cmb.AppendLP(b, a.Verdict)
	b = cmb.AppendLP(b, a.By)
	b = cmb.AppendLP(b, strconv.FormatInt(a.At, 10))
	return b, nil
}

// Sign returns a copy of a signed with priv (Ed25519, base64url unpadded).
func (a Attestation) Sign(priv ed25519.PrivateKey) (Attestation, error) {
	if a.Verdict != Tethered && a.Verdict != Severed {
		return a, fmt.Errorf("%w: verdict %q", ErrBadAttestation, a.Verdict)
	}
	p, err := a.Payload()
	if err != nil {
		return a, err
	}
	a.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, p))
	a.SigAlg = "ed25519"
	return a, nil
}

// Verify checks the signature against the integrator's resolved key.
func (a Attestation) Verify(pub ed25519.PublicKey) error {
	if a.SigAlg != "" && a.SigAlg != "ed25519" {
		return fmt.Errorf("%w: sigAlg %q", ErrBadAttestation, a.SigAlg)
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: integrator key has %d bytes", ErrBadAttestation, len(pub))
	}
	sig, err := base64.RawURLEncoding.DecodeString(a.Sig)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64url: %v", ErrBadAttestation, err)
	}
	p, err := a.Payload()
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, p, sig) {
		return fmt.Errorf("%w: signature of %s by %s does not verify", ErrBadAttestation, a.Of, a.By)
	}
	return nil
}

// Comparable reports whether two verdicts can be compared (same kernel).
func Comparable(kernelA, kernelB string) bool { return kernelA == kernelB }

// Fixed6 formats x with exactly six fractional digits the way JavaScript's
// Number.prototype.toFixed(6) does: from the exact binary value, with an
// exact tie rounded up (away from zero), where strconv rounds it to even.
// toFixed switches to exponent notation at 1e21; drifts never get there.
func Fixed6(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	sign := ""
	if x < 0 {
		sign = "-"
		x = -x
	}
	r := new(big.Rat).SetFloat64(x)
	r.Mul(r, big.NewRat(1_000_000, 1))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	rem := new(big.Rat).Sub(r, new(big.Rat).SetInt(n))
	if rem.Cmp(big.NewRat(1, 2)) >= 0 {
		n.Add(n, big.NewInt(1))
	}
	s := n.String()
	for len(s) < 7 {
		s = "0" + s
	}
	return sign + s[:len(s)-6] + "." + s[len(s)-6:]
}

// DriftResult is the outcome of a tether check.
type DriftResult struct {
	// Checked is false when no field could be compared; such a remix stays
	// tethered ("unverifiable, never severed").
	Checked  bool
	Tethered bool
	Drift    float64 // meaningful only when Checked
}

// Verdict is Tethered or Severed.
func (d DriftResult) Verdict() string {
	if d.Tethered {
		return Tethered
	}
	return Severed
}

// Drift computes §15.8 tether drift between a remix and its anchor (the
// nearest resolvable lineage root), per field vectors in store field order:
// drift = Σ α_f·(1 − cos(remix_f, anchor_f)) / Σ α_f over fields present on
// both sides with equal dimension. alpha nil means every α is 1; an α of 0
// excludes its field (unlike the reference, which turns 0 into 1).
func Drift(remix, anchor [store.NumFields][]float64, alpha *[store.NumFields]float64) DriftResult {
	var num, den float64
	for f := range remix {
		r, a := remix[f], anchor[f]
		if len(r) == 0 || len(r) != len(a) {
			continue
		}
		w := 1.0
		if alpha != nil {
			w = alpha[f]
		}
		if w == 0 {
			continue
		}
		cos, ok := cosine(r, a)
		if !ok {
			continue
		}
		num += w * (1 - cos)
		den += w
	}
	if den == 0 {
		return DriftResult{Checked: false, Tethered: true}
	}
	d := num / den
	return DriftResult{Checked: true, Tethered: d <= SeverThreshold, Drift: d}
}

func cosine(a, b []float64) (float64, bool) {
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	if na == 0 || nb == 0 {
		return 0, false
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb)), true
}

// Anchor picks the tether anchor of a remix: the oldest ancestor that is
// stored ("nearest resolvable lineage root"). Ancestors are listed roots
// first, so that is the first stored one. ok is false when none is stored.
func Anchor(ancestors []string, stored func(string) bool) (string, bool) {
	for _, a := range ancestors {
		if stored(a) {
			return a, true
		}
	}
	return "", false
}
