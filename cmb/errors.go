package cmb

import (
	"errors"
	"fmt"
)

// Reason names the rule a record or frame broke. The strings are stable: they
// appear in logs, counters and the `cmb verify` CLI output.
type Reason string

const (
	ReasonBadRecord       Reason = "bad-record"       // malformed JSON or a known member of the wrong type
	ReasonBadAddress      Reason = "bad-address"      // key is neither cmb1-<64 hex> nor cmb-<32 hex>
	ReasonAddressMismatch Reason = "address-mismatch" // key does not match the fields (and lineage)
	ReasonBadSignature    Reason = "bad-signature"    // sig does not verify, or is not 64 bytes
	ReasonUnsigned        Reason = "unsigned"         // no sig where one is required
	ReasonWrongGroup      Reason = "wrong-group"      // signed group is not the receiver's group
	ReasonWrongRecipient  Reason = "wrong-recipient"  // signed to is set and is not the receiver
	ReasonBadName         Reason = "bad-name"         // display name grammar (§3.1.2)
	ReasonBadGroup        Reason = "bad-group"        // group grammar (§5.8)
	ReasonBadNodeID       Reason = "bad-node-id"      // nodeId is not a v7/v4 UUID
	ReasonFieldTooLong    Reason = "field-too-long"   // a field text exceeds MaxFieldBytes
	ReasonTooManyParents  Reason = "too-many-parents" // more than MaxParents direct parents
	ReasonBadLineage      Reason = "bad-lineage"      // malformed or inconsistent lineage
	ReasonSealed          Reason = "sealed"           // fields are E2E ciphertext; open before this check
)

// Error is a validation failure. Test for a rule with errors.Is(err, cmb.ErrWrongGroup) etc.
type Error struct {
	Reason Reason
	Detail string
	Err    error
}

func newError(r Reason, detail string, err error) *Error {
	return &Error{Reason: r, Detail: detail, Err: err}
}

func (e *Error) Error() string {
	switch {
	case e.Detail != "" && e.Err != nil:
		return fmt.Sprintf("%s: %s: %v", e.Reason, e.Detail, e.Err)
	case e.Detail != "":
		return fmt.Sprintf("%s: %s", e.Reason, e.Detail)
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Reason, e.Err)
	}
	return string(e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same Reason, so the sentinels below work with errors.Is.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Reason == e.Reason && t.Detail == "" && t.Err == nil
}

// Sentinels for errors.Is.
var (
	ErrBadRecord       = &Error{Reason: ReasonBadRecord}
	ErrBadAddress      = &Error{Reason: ReasonBadAddress}
	ErrAddressMismatch = &Error{Reason: ReasonAddressMismatch}
	ErrBadSignature    = &Error{Reason: ReasonBadSignature}
	ErrUnsigned        = &Error{Reason: ReasonUnsigned}
	ErrWrongGroup      = &Error{Reason: ReasonWrongGroup}
	ErrWrongRecipient  = &Error{Reason: ReasonWrongRecipient}
	ErrBadName         = &Error{Reason: ReasonBadName}
	ErrBadGroup        = &Error{Reason: ReasonBadGroup}
	ErrBadNodeID       = &Error{Reason: ReasonBadNodeID}
	ErrFieldTooLong    = &Error{Reason: ReasonFieldTooLong}
	ErrTooManyParents  = &Error{Reason: ReasonTooManyParents}
	ErrBadLineage      = &Error{Reason: ReasonBadLineage}
	ErrSealed          = &Error{Reason: ReasonSealed}
)

// ReasonOf returns the Reason of a validation error, or "" for any other error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}
