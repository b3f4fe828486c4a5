package cmb

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/cmbnode/cmbnode/group"
)

// Validate checks the rules a record must meet whatever its audience: a
// well-formed address, an author, group grammar, field sizes and lineage
// shape. It does not recompute the address or check the signature.
func (r *Record) Validate() error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	if r.CreatedBy == "" {
		return newError(ReasonBadRecord, "createdBy is empty", nil)
	}
	if r.CreatedAt < 0 {
		return newError(ReasonBadRecord, fmt.Sprintf("createdAt %d is negative", r.CreatedAt), nil)
	}
	if r.HasGroup() {
		if err := group.Validate(r.Group); err != nil {
			return newError(ReasonBadGroup, "", err)
		}
	}
	if !r.IsSealed() {
		for i := range r.Fields {
			if n := len(r.Fields[i].Text); n > MaxFieldBytes {
				return newError(ReasonFieldTooLong, fmt.Sprintf("%s text is %d bytes, at most %d allowed", FieldNames[i], n, MaxFieldBytes), nil)
			}
		}
	}
	return r.validateLineage()
}

func (r *Record) validateLineage() error {
	l := r.Lineage
	if l == nil {
		return nil
	}
	if len(l.Parents) > MaxParents {
		return newError(ReasonTooManyParents, fmt.Sprintf("%d parents, at most %d allowed", len(l.Parents), MaxParents), nil)
	}
	if len(l.Ancestors) > MaxAncestors {
		return newError(ReasonBadLineage, fmt.Sprintf("%d ancestors, at most %d allowed", len(l.Ancestors), MaxAncestors), nil)
	}
	if len(l.Parents) == 0 && len(l.Ancestors) > 0 {
		return newError(ReasonBadLineage, "ancestors without parents", nil)
	}
	seen := make(map[string]struct{}, len(l.Parents))
	for _, p := range l.Parents {
		if SchemeOf(p) == SchemeUnknown {
			return newError(ReasonBadLineage, fmt.Sprintf("parent %q is not a CMB key", Truncate(p, 80)), nil)
		}
		if p == r.Key {
			return newError(ReasonBadLineage, "record lists itself as a parent", nil)
		}
		if _, dup := seen[p]; dup {
			return newError(ReasonBadLineage, "parent "+p+" is listed twice", nil)
		}
		seen[p] = struct{}{}
	}
	if len(l.Ancestors) > 0 {
		anc := make(map[string]struct{}, len(l.Ancestors))
		for _, a := range l.Ancestors {
			if SchemeOf(a) == SchemeUnknown {
				return newError(ReasonBadLineage, fmt.Sprintf("ancestor %q is not a CMB key", Truncate(a, 80)), nil)
			}
			if a == r.Key {
				return newError(ReasonBadLineage, "record lists itself as an ancestor", nil)
			}
			anc[a] = struct{}{}
		}
		// ancestors = union(parents' ancestors) + parents (§15.2).
		for _, p := range l.Parents {
			if _, ok := anc[p]; !ok {
				return newError(ReasonBadLineage, "parent "+p+" is missing from ancestors", nil)
			}
		}
	}
	return nil
}

// Audience is who a receiver is: its group and its nodeId.
type Audience struct {
	Group string // the receiver's group; a record without a group member is "default"
	Self  string // the receiver's nodeId, compared case-insensitively with `to`
}

// CheckAudience rejects a record authored for another group or another
// recipient. It is reported apart from a bad signature: "not for you", not "forged".
func (r *Record) CheckAudience(a Audience) error {
	g := r.Group
	if !r.HasGroup() {
		g = group.Default // §14 A11: absent group is the implicit default group
	}
	if g != group.Normalize(a.Group) {
		return newError(ReasonWrongGroup, fmt.Sprintf("record is for group %q, this node is in %q", Truncate(g, 64), group.Normalize(a.Group)), nil)
	}
	if r.To != "" && !strings.EqualFold(r.To, a.Self) {
		return newError(ReasonWrongRecipient, fmt.Sprintf("record is directed to %s", Truncate(r.To, 64)), nil)
	}
	return nil
}

// Policy is what a receiver checks a record against.
type Policy struct {
	Audience
	// AuthorKey is the author's Ed25519 key, or nil if the receiver holds none.
	AuthorKey ed25519.PublicKey
	// AuthorVerifyKey is AuthorKey decoded ahead (NewVerifyKey), or nil;
	// one decoded from another key is not used.
	AuthorVerifyKey *VerifyKey
	// AllowUnsigned admits an unsigned record when no key is held for its
	// author (§18.3.1's permissive rule). Off by default: cmbnode requires
	// signatures. The caller also applies the downgrade rule: an author
	// known to have signed before gets no unsigned record admitted.
	AllowUnsigned bool
}

// Verify runs every receive-side check in the order of MMP §18.3.1 (after
// decryption): shape, address, signature, audience. The first failure is
// returned as a typed *Error. An unsigned record is refused whenever the
// author's key is known, legacy `cmb-` records included: a node holding
// the key MUST verify (§18.3.1, SEC-7).
func (r *Record) Verify(p Policy) error {
	if r.IsSealed() {
		return newError(ReasonSealed, "fields are encrypted; open the record first", nil)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if err := r.VerifyAddress(); err != nil {
		return err
	}
	switch unsigned := r.IsUnsigned(); {
	case unsigned && p.AuthorKey != nil:
		return newError(ReasonUnsigned, "record is unsigned but the key of author "+Truncate(r.CreatedBy, 64)+" is known, so it must be signed", ErrDowngrade)
	case unsigned && !p.AllowUnsigned:
		return newError(ReasonUnsigned, "record is unsigned and unsigned records are not accepted", nil)
	case unsigned:
	case p.AuthorKey != nil:
		if err := r.VerifySignatureWith(p.AuthorKey, p.AuthorVerifyKey); err != nil {
			return err
		}
	default:
		return newError(ReasonBadSignature, "no key is known for author "+Truncate(r.CreatedBy, 64), errNoKey)
	}
	return r.CheckAudience(p.Audience)
}

// ErrDowngrade is wrapped by the refusal of an unsigned record from an
// author that is known to sign (its key is held, or it signed before).
var ErrDowngrade = errors.New("signature downgrade refused")

var errNoKey = errors.New("author key unknown")
