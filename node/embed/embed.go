// Package embed turns field texts into vectors: the Encoder interface the
// node computes per-field vectors with, the built-in hashed character
// n-gram encoder (MMP §9.2's fallback kernel) and an OpenAI-compatible
// /v1/embeddings HTTP encoder (a local Ollama, llama.cpp server, vLLM…).
//
// Every encoder names its kernel: vectors are comparable only within one
// kernel id (MMP §15.8), and the node never compares vectors of two.
package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
)

// Kernel identifies an encoder's vector space.
type Kernel struct {
	// ID is the kernel id (MMP §15.8: encoder + dimensionality token), the
	// namespace the node keeps this kernel's vectors under.
	ID string
	// Fingerprint is CGP's embeddings_fingerprint,
	// <model-id>/<dimensions>[/<normalization>].
	Fingerprint string
	// Dim is the vectors' length.
	Dim int
}

// Encoder computes one vector per text, in order. Encode either returns
// exactly len(texts) vectors of Kernel().Dim, or an error: a partial answer
// is an error. Implementations are safe for concurrent use.
type Encoder interface {
	Kernel() Kernel
	Encode(ctx context.Context, texts []string) ([][]float32, error)
}

// ErrEncoder wraps every failure of an encoder to answer.
var ErrEncoder = errors.New("encoder failed")

var kernelIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckKernel validates a kernel's names: the id is a short token (it names
// a store namespace), the fingerprint follows CGP's grammar with Dim.
func CheckKernel(k Kernel) error {
	if !kernelIDRe.MatchString(k.ID) {
		return fmt.Errorf("kernel id %q must be 1-63 of a-z 0-9 . _ -", k.ID)
	}
	if k.Dim <= 0 || k.Dim > 1<<14 {
		return fmt.Errorf("kernel %s: dimension %d is not in [1,16384]", k.ID, k.Dim)
	}
	if !fingerprintRe.MatchString(k.Fingerprint) {
		return fmt.Errorf("kernel %s: fingerprint %q is not <model-id>/<dimensions>[/<normalization>]", k.ID, k.Fingerprint)
	}
	var d int
	if _, err := fmt.Sscanf(dimOf(k.Fingerprint), "%d", &d); err != nil || d != k.Dim {
		return fmt.Errorf("kernel %s: fingerprint %q does not declare dimension %d", k.ID, k.Fingerprint, k.Dim)
	}
	return nil
}

var fingerprintRe = regexp.MustCompile(`^[^/\s]+/[0-9]+(/[^/\s]+)?$`)

func dimOf(fp string) string {
	for i := 0; i < len(fp); i++ {
		if fp[i] == '/' {
			rest := fp[i+1:]
			for j := 0; j < len(rest); j++ {
				if rest[j] == '/' {
					return rest[:j]
				}
			}
			return rest
		}
	}
	return ""
}

// Normalize scales v to unit length in place (a zero vector stays zero) and
// reports whether it holds only finite numbers.
func Normalize(v []float32) bool {
	var s float64
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return true
	}
	inv := 1 / math.Sqrt(s)
	for i := range v {
		v[i] = float32(float64(v[i]) * inv)
	}
	return true
}

// Dot is the dot product of two equal-length vectors (the cosine, for
// unit vectors).
func Dot(a, b []float32) float64 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return float64(s)
}
