// Package opt fills in options structs.
package opt

import "cmp"

// Default sets *v to def when *v is zero or less. An options struct's zero
// value means "the defaults", and no setting it fills gives a negative
// number a meaning of its own, so both take the default.
func Default[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}
