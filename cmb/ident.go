package cmb

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds a display name in UTF-8 bytes, not characters (MMP §3.1.2, §14 A16).
const MaxNameBytes = 64

// ValidateName checks a node's display name: 1–64 UTF-8 bytes of printable
// characters (categories L, M, N, P, S, Zs), no controls, no invalid UTF-8.
func ValidateName(name string) error {
	if name == "" {
		return newError(ReasonBadName, "name is empty", nil)
	}
	if len(name) > MaxNameBytes {
		return newError(ReasonBadName, fmt.Sprintf("name is %d bytes, at most %d allowed", len(name), MaxNameBytes), nil)
	}
	for i, r := range name {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(name[i:]); size <= 1 {
				return newError(ReasonBadName, fmt.Sprintf("name has invalid UTF-8 at byte %d", i), nil)
			}
		}
		if unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs) {
			continue
		}
		return newError(ReasonBadName, fmt.Sprintf("name has non-printable character %U at byte %d", r, i), nil)
	}
	return nil
}

// ValidateNodeID checks a nodeId: a UUID in the 8-4-4-4-12 hex form, version 7
// (what we mint) or 4 (older nodes), RFC 9562 variant. Case is not significant.
func ValidateNodeID(id string) error {
	if len(id) != 36 {
		return newError(ReasonBadNodeID, fmt.Sprintf("nodeId %q is %d characters, a UUID has 36", id, len(id)), nil)
	}
	for i := 0; i < 36; i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return newError(ReasonBadNodeID, fmt.Sprintf("nodeId %q: expected '-' at %d", id, i), nil)
			}
		default:
			if !isHex(c) {
				return newError(ReasonBadNodeID, fmt.Sprintf("nodeId %q: %q at %d is not hex", id, c, i), nil)
			}
		}
	}
	if v := id[14]; v != '7' && v != '4' {
		return newError(ReasonBadNodeID, fmt.Sprintf("nodeId %q is UUID version %c; versions 7 and 4 are accepted", id, v), nil)
	}
	switch id[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
	default:
		return newError(ReasonBadNodeID, fmt.Sprintf("nodeId %q does not have the RFC 9562 variant", id), nil)
	}
	return nil
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
