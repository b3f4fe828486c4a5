// Package opt fills in options structs.
package opt

import (
	"cmp"
	"log/slog"
)

// Default sets *v to def when *v is zero or less. An options struct's zero
// value means "the defaults", and no setting it fills gives a negative
// number a meaning of its own, so both take the default.
func Default[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}

// Logger sets *l to a logger that discards everything when it is nil, so a
// component given no logger stays silent instead of writing to the
// process-wide default.
func Logger(l **slog.Logger) {
	if *l == nil {
		*l = slog.New(slog.DiscardHandler)
	}
}
