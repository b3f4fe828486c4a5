package cmb

import (
	"cmp"
	"crypto/ed25519"
	"fmt"
	"math"
	"slices"

	"golang.org/x/text/unicode/norm"

	"github.com/cmbnode/cmbnode/group"
)

// Draft is what an author supplies to create a CMB. Build fills in the rest.
type Draft struct {
	Fields    Fields   // empty text becomes "neutral"; all text is NFC-normalised
	Parents   []string // direct parents; non-empty makes the record a remix
	Ancestors []string // the ancestor closure; nil means "just the parents"
	Method    string   // lineage method, e.g. "SVAF-v2"; defaults to "remix"
	Group     string   // "" means group.Default
	To        string   // recipient nodeId for a directed CMB, "" for broadcast
	CreatedBy string   // the author's nodeId
	CreatedAt int64    // the author's Unix time, ms
}

// Build creates and signs a v1.1 record (cmb1- key, mmp-sig-v1). The record
// always carries its group, even "default" (§14 A11).
func Build(d Draft, priv ed25519.PrivateKey) (*Record, error) {
	if err := ValidateNodeID(d.CreatedBy); err != nil {
		return nil, fmt.Errorf("build record: author: %w", err)
	}
	if d.To != "" {
		if err := ValidateNodeID(d.To); err != nil {
			return nil, fmt.Errorf("build record: recipient: %w", err)
		}
	}
	g := group.Normalize(d.Group)
	if err := group.Validate(g); err != nil {
		return nil, newError(ReasonBadGroup, "build record", err)
	}
	r := &Record{CreatedBy: d.CreatedBy, CreatedAt: d.CreatedAt, To: d.To}
	r.SetGroup(g)
	for i := range d.Fields {
		f := d.Fields[i]
		f.Text = orNeutral(norm.NFC.String(f.Text))
		if i != Mood && (f.Valence != nil || f.Arousal != nil) {
			return nil, newError(ReasonBadRecord, FieldNames[i]+" cannot carry valence or arousal", nil)
		}
		for _, v := range []*float64{f.Valence, f.Arousal} {
			if v != nil && (math.IsNaN(*v) || *v < -1 || *v > 1) {
				return nil, newError(ReasonBadRecord, fmt.Sprintf("mood valence/arousal %v is outside [-1, 1]", *v), nil)
			}
		}
		for _, v := range f.Vector {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, newError(ReasonBadRecord, FieldNames[i]+" vector has a non-finite value", nil)
			}
		}
		r.Fields[i] = f
	}
	if len(d.Parents) > 0 {
		anc := d.Ancestors
		if anc == nil {
			anc = d.Parents
		}
		r.Lineage = &Lineage{
			Parents:   slices.Clone(d.Parents),
			Ancestors: slices.Clone(anc),
			Method:    cmp.Or(d.Method, "remix"),
		}
	}
	texts := r.Fields.Texts()
	r.Key = addressV1(&texts, r.Parents(), r.CreatedBy, true)
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := r.Sign(priv); err != nil {
		return nil, err
	}
	return r, nil
}
