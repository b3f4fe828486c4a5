// Package cmb owns the MMP v1.1 Cognitive Memory Block: the record and its JSON
// shape, the seven fields, the cmb1- content address (and verify-only legacy
// cmb-), the mmp-sig-v1 signature, typed validation errors, and MMP frames with
// their 4-byte length-prefixed framing. It knows nothing of network or disk.
package cmb

import (
	"encoding/json"
	"slices"
)

// The seven CAT7 fields in the fixed order every hash uses (MMP §8.2).
const (
	Focus = iota
	Issue
	Intent
	Motivation
	Commitment
	Perspective
	Mood
	NumFields
)

// FieldNames lists the seven field names in spec order.
var FieldNames = [NumFields]string{"focus", "issue", "intent", "motivation", "commitment", "perspective", "mood"}

// FieldIndex returns the spec index of a field name.
func FieldIndex(name string) (int, bool) {
	for i, n := range FieldNames {
		if n == name {
			return i, true
		}
	}
	return -1, false
}

// Neutral is the text of a field the author could not fill (MMP §8.2, §14 A1).
const Neutral = "neutral"

// Limits enforced by validation. The frame cap (1 MiB) bounds everything; these
// make a single hostile member fail fast with a named reason.
const (
	MaxFieldBytes = 64 << 10 // one field's text, UTF-8 bytes
	MaxParents    = 32       // direct parents of one remix
	MaxAncestors  = 12000    // ~830 KB of keys: what fits in a frame
)

// Field is one CAT7 field. Vector is advisory and never hashed; Valence and
// Arousal are meaningful on mood only. Unknown members are kept in Extra.
type Field struct {
	Text    string
	Vector  []float64
	Valence *float64
	Arousal *float64
	Extra   Members
}

// Fields holds the seven fields in spec order.
type Fields [NumFields]Field

// Texts returns the seven texts in spec order.
func (f *Fields) Texts() [NumFields]string {
	var t [NumFields]string
	for i := range f {
		t[i] = f[i].Text
	}
	return t
}

// Lineage is a remix's link to what it came from (MMP §15.2).
type Lineage struct {
	Parents   []string
	Ancestors []string
	Method    string
	Extra     Members
	present   presence
}

// E2E is the `_e2e` member present while fields travel as ciphertext.
type E2E struct {
	Nonce string
	Extra Members
}

// Record is a CMB in the flat v1.1 shape (MMP §20.2). A record is immutable
// once built or decoded; Encode re-emits every member it was decoded with,
// unknown ones included, so a relayed record is the record received.
type Record struct {
	Key       string
	CreatedBy string
	CreatedAt int64 // author's Unix time, ms
	Group     string
	To        string
	Fields    Fields
	// FieldsExtra keeps members of `fields` beyond the seven (ignored, relayed).
	FieldsExtra Members
	// Sealed holds the base64 ciphertext that replaces `fields` while the
	// record is E2E-encrypted; Fields is then zero.
	Sealed  string
	Lineage *Lineage
	Sig     string
	SigAlg  string
	E2E     *E2E
	Tether  json.RawMessage
	Extra   Members
	present presence
	// enc, when set, is AppendJSON's bytes: the frame's copy of them the
	// record was decoded from (Canonical). Never modified.
	enc []byte
}

// presence records which optional members a decoded record carried, so that
// absent and empty stay distinct on re-emission (absent group means
// "default", an empty one does not).
type presence uint16

const (
	hasGroup presence = 1 << iota
	hasTo
	hasLineage // member present (possibly null)
	hasSig
	hasSigAlg
	hasMethod
	hasAncestors
	hasParents
)

// HasGroup reports whether the record carries a `group` member.
func (r *Record) HasGroup() bool { return r.present&hasGroup != 0 }

// IsUnsigned reports a record that carries no sig member at all (an empty
// "sig" on the wire is a bad signature, not an unsigned record).
func (r *Record) IsUnsigned() bool { return r.present&hasSig == 0 && r.Sig == "" }

// SetGroup sets the group and marks it present.
func (r *Record) SetGroup(g string) { r.Group = g; r.present |= hasGroup; r.enc = nil }

// IsSealed reports whether the fields are E2E ciphertext.
func (r *Record) IsSealed() bool { return r.Sealed != "" }

// SealNonce returns the E2E nonce: `_e2e.nonce`, or a legacy top-level `nonce` (§14 A8).
func (r *Record) SealNonce() string {
	if r.E2E != nil && r.E2E.Nonce != "" {
		return r.E2E.Nonce
	}
	if v, ok := r.Extra.Get("nonce"); ok {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return ""
}

// Parents returns the direct parents, or nil for a root.
func (r *Record) Parents() []string {
	if r.Lineage == nil {
		return nil
	}
	return r.Lineage.Parents
}

// Ancestors returns the carried ancestor closure, or nil.
func (r *Record) Ancestors() []string {
	if r.Lineage == nil {
		return nil
	}
	return r.Lineage.Ancestors
}

// IsRemix reports whether the record is keyed as a remix: it carries parents.
func (r *Record) IsRemix() bool { return len(r.Parents()) > 0 }

// Clone returns a deep copy, for callers that derive a new record (sealing,
// opening) without touching one another's.
func (r *Record) Clone() *Record {
	c := *r
	c.enc = nil // the copy is there to be changed
	for i := range c.Fields {
		c.Fields[i].Vector = append([]float64(nil), r.Fields[i].Vector...)
		if r.Fields[i].Vector == nil {
			c.Fields[i].Vector = nil
		}
		if v := r.Fields[i].Valence; v != nil {
			x := *v
			c.Fields[i].Valence = &x
		}
		if v := r.Fields[i].Arousal; v != nil {
			x := *v
			c.Fields[i].Arousal = &x
		}
		c.Fields[i].Extra = r.Fields[i].Extra.clone()
	}
	if r.Lineage != nil {
		l := *r.Lineage
		l.Parents = slices.Clone(r.Lineage.Parents)
		l.Ancestors = slices.Clone(r.Lineage.Ancestors)
		l.Extra = r.Lineage.Extra.clone()
		c.Lineage = &l
	}
	if r.E2E != nil {
		e := *r.E2E
		e.Extra = r.E2E.Extra.clone()
		c.E2E = &e
	}
	c.Tether = append(json.RawMessage(nil), r.Tether...)
	if r.Tether == nil {
		c.Tether = nil
	}
	c.FieldsExtra = r.FieldsExtra.clone()
	c.Extra = r.Extra.clone()
	return &c
}

// Member is one unknown JSON member, kept verbatim.
type Member struct {
	Name  string
	Value json.RawMessage
}

// Members are unknown members in a stable (name-sorted) order.
type Members []Member

// Get returns the raw value of an unknown member.
func (m Members) Get(name string) (json.RawMessage, bool) {
	for _, x := range m {
		if x.Name == name {
			return x.Value, true
		}
	}
	return nil, false
}

func (m Members) clone() Members {
	if m == nil {
		return nil
	}
	c := make(Members, len(m))
	for i, x := range m {
		c[i] = Member{Name: x.Name, Value: append(json.RawMessage(nil), x.Value...)}
	}
	return c
}
