// Package group owns what a mesh group is: the name grammar of MMP §5.8, the
// pubsub topic a group maps to, and the rule that an absent group is "default".
package group

import (
	"cmp"
	"errors"
	"fmt"
)

// Default is the implicit group of every node that declares none (MMP §5.8).
const Default = "default"

// MaxLen is the longest group id MMP allows, in bytes (ids are ASCII).
const MaxLen = 64

// ErrBadGroup is wrapped by every grammar failure so callers can test with errors.Is.
var ErrBadGroup = errors.New("bad group name")

// Validate reports whether name is a group id MMP accepts: [a-z0-9-_.]+, at most 64 bytes.
func Validate(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty (use %q for the implicit group)", ErrBadGroup, Default)
	}
	if len(name) > MaxLen {
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrBadGroup, len(name), MaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' {
			continue
		}
		return fmt.Errorf("%w: %q has %q at byte %d; allowed are a-z 0-9 - _ .", ErrBadGroup, name, c, i)
	}
	return nil
}

// Normalize maps an absent group to Default; other values are returned unchanged.
func Normalize(name string) string { return cmp.Or(name, Default) }

// Topic is the GossipSub topic that carries one group's cmb frames.
func Topic(name string) string {
	return "/mmp/1.1.0/group/" + name
}
