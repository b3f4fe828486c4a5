package e2e

import (
	"fmt"
	"io"

	"github.com/cmbnode/cmbnode/cmb"
)

// SealRecord returns a copy of r whose `fields` object is replaced by its
// ciphertext for the box's peer, with `_e2e.nonce` beside it (MMP §18.2.1,
// as the reference runtime deploys it). Key, author, time, group, to,
// lineage and signature stay in clear: the receiver verifies them after
// opening. The plaintext is the fields object exactly as it travels, so
// unknown members survive the round trip.
func SealRecord(r *cmb.Record, box *Box, random io.Reader) (*cmb.Record, error) {
	if r.IsSealed() {
		return nil, fmt.Errorf("seal record %s: fields are already sealed", r.Key)
	}
	ct, nonce, err := box.Seal(r.FieldsJSON(), random)
	if err != nil {
		return nil, fmt.Errorf("seal record %s: %w", r.Key, err)
	}
	s := r.Clone()
	s.Fields, s.FieldsExtra = cmb.Fields{}, nil
	s.Sealed = ct
	s.E2E = &cmb.E2E{Nonce: nonce}
	return s, nil
}

// OpenRecord returns a copy of a sealed record with its fields decrypted and
// `_e2e` (and a legacy top-level `nonce`) removed. It authenticates the
// ciphertext only; the caller still verifies address and signature, which
// bind the plaintext through the key.
func OpenRecord(r *cmb.Record, box *Box) (*cmb.Record, error) {
	if !r.IsSealed() {
		return nil, fmt.Errorf("open record %s: fields are not sealed", r.Key)
	}
	nonce := r.SealNonce()
	if nonce == "" {
		return nil, fmt.Errorf("open record %s: no _e2e.nonce", r.Key)
	}
	plain, err := box.Open(r.Sealed, nonce)
	if err != nil {
		return nil, fmt.Errorf("open record %s: %w", r.Key, err)
	}
	fields, extra, err := cmb.DecodeFields(plain)
	if err != nil {
		return nil, fmt.Errorf("open record %s: decrypted fields: %w", r.Key, err)
	}
	o := r.Clone()
	o.Sealed, o.E2E = "", nil
	o.Fields, o.FieldsExtra = *fields, extra
	kept := o.Extra[:0]
	for _, m := range o.Extra {
		if m.Name != "nonce" {
			kept = append(kept, m)
		}
	}
	o.Extra = kept
	return o, nil
}
