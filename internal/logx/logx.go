// Package logx holds two slog.Handler wrappers the daemon's logs need:
// one that keeps a single "component" key on every line however loggers
// are nested, and one that quietens a library's noise (demoting known
// chatter to DEBUG and rate-limiting repeats) while counting what it held
// back.
package logx

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ComponentKey is the attribute naming the part of the daemon a line
// comes from.
const ComponentKey = "component"

// OneComponent wraps h so that every line carries at most one top-level
// "component" attribute: the innermost one. A logger built with
// l.With("component", "mesh").With("component", "pubsub") writes
// component=pubsub once, not both (JSON with a repeated key is read by
// most tools as the last value and by some as an error); a record's own
// component attribute (l.Warn(msg, "component", "badger")) replaces the
// logger's the same way. Attributes inside a group (after WithGroup) are
// not top-level and pass through unchanged.
func OneComponent(h slog.Handler) slog.Handler {
	return &componentHandler{base: h, inner: h}
}

// componentHandler keeps the component out of the attributes it hands
// the inner handler until it knows the last one: base is the handler it
// wraps, comp the component so far, ops everything else added by With
// and WithGroup in order, and inner is base with comp and then ops
// applied (rebuilt on each With: loggers are built once, lines are many).
type componentHandler struct {
	base  slog.Handler
	comp  *slog.Attr
	ops   []handlerOp
	inner slog.Handler
}

// handlerOp is one With (attrs) or WithGroup (group) call.
type handlerOp struct {
	attrs []slog.Attr
	group string
}

func (h *componentHandler) grouped() bool {
	return slices.ContainsFunc(h.ops, func(o handlerOp) bool { return o.group != "" })
}

func (h *componentHandler) rebuild() *componentHandler {
	in := h.base
	if h.comp != nil {
		in = in.WithAttrs([]slog.Attr{*h.comp})
	}
	for _, o := range h.ops {
		if o.group != "" {
			in = in.WithGroup(o.group)
		} else {
			in = in.WithAttrs(o.attrs)
		}
	}
	h.inner = in
	return h
}

// splitComponent returns attrs without top-level component attributes,
// and the last one of those (nil if none).
func splitComponent(attrs []slog.Attr) ([]slog.Attr, *slog.Attr) {
	var comp *slog.Attr
	rest := make([]slog.Attr, 0, len(attrs))
	for _, a := range attrs {
		if a.Key == ComponentKey {
			c := a
			comp = &c
			continue
		}
		rest = append(rest, a)
	}
	return rest, comp
}

func (h *componentHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *componentHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &componentHandler{base: h.base, comp: h.comp, ops: slices.Clone(h.ops)}
	if !h.grouped() {
		var comp *slog.Attr
		attrs, comp = splitComponent(attrs)
		if comp != nil {
			n.comp = comp
		}
	}
	if len(attrs) > 0 {
		n.ops = append(n.ops, handlerOp{attrs: attrs})
	}
	return n.rebuild()
}

func (h *componentHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := &componentHandler{base: h.base, comp: h.comp, ops: append(slices.Clone(h.ops), handlerOp{group: name})}
	return n.rebuild()
}

func (h *componentHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.grouped() {
		return h.inner.Handle(ctx, r)
	}
	var comp *slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == ComponentKey {
			c := a
			comp = &c
		}
		return true
	})
	if comp == nil {
		return h.inner.Handle(ctx, r)
	}
	// The record names its own component: it replaces the logger's. Rare
	// (badger's adapter does it), so rebuilding here costs little.
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != ComponentKey {
			out.AddAttrs(a)
		}
		return true
	})
	n := &componentHandler{base: h.base, comp: comp, ops: h.ops}
	return n.rebuild().inner.Handle(ctx, out)
}

// QuietOptions tune Quiet.
type QuietOptions struct {
	// Demote lists messages (exactly as the library logs them) that are
	// routine for this daemon however the library rates them: they are
	// written at DEBUG.
	Demote []string
	// Burst is how many lines of one message (at one level) are written
	// per Window; the rest are counted, not written (default 5).
	Burst int
	// Window is the span Burst applies to (default one minute).
	Window time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// maxTracked bounds how many distinct messages Quiet tracks at once; past
// it the tracking starts afresh, which at worst lets one more burst of
// each through.
const maxTracked = 1024

// Quiet wraps h, the handler a library logs through, so that a flood from
// it cannot drown the daemon's own lines: messages in o.Demote go to
// DEBUG, and any message repeated more than o.Burst times in o.Window is
// held back. The first line of a message written after some were held
// back carries "suppressed" (how many) so the log still says how much
// happened; Suppressed counts them all.
func Quiet(h slog.Handler, o QuietOptions) *QuietHandler {
	if o.Burst <= 0 {
		o.Burst = 5
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	q := &quietState{opts: o, demote: map[string]bool{}, seen: map[quietKey]*quietCount{}}
	for _, m := range o.Demote {
		q.demote[m] = true
	}
	return &QuietHandler{inner: h, st: q}
}

// QuietHandler is the handler Quiet returns. Loggers derived from it
// (With, WithGroup) share its limits and counts.
type QuietHandler struct {
	inner slog.Handler
	st    *quietState
}

type quietKey struct {
	level slog.Level
	msg   string
}

type quietCount struct {
	start      time.Time
	n          int
	suppressed int64
}

type quietState struct {
	opts       QuietOptions
	demote     map[string]bool
	mu         sync.Mutex
	seen       map[quietKey]*quietCount
	suppressed atomic.Int64
	demoted    atomic.Int64
}

// Suppressed is how many lines were held back by the rate limit.
func (q *QuietHandler) Suppressed() int64 { return q.st.suppressed.Load() }

// Demoted is how many lines were written at DEBUG (or dropped below the
// level) instead of the level the library gave them.
func (q *QuietHandler) Demoted() int64 { return q.st.demoted.Load() }

func (q *QuietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	// A demoted message is judged by its new level in Handle.
	return q.inner.Enabled(ctx, l)
}

func (q *QuietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &QuietHandler{inner: q.inner.WithAttrs(attrs), st: q.st}
}

func (q *QuietHandler) WithGroup(name string) slog.Handler {
	return &QuietHandler{inner: q.inner.WithGroup(name), st: q.st}
}

func (q *QuietHandler) Handle(ctx context.Context, r slog.Record) error {
	s := q.st
	if s.demote[r.Message] && r.Level > slog.LevelDebug {
		s.demoted.Add(1)
		r.Level = slog.LevelDebug
		if !q.inner.Enabled(ctx, r.Level) {
			return nil
		}
	}
	now := s.opts.Now()
	k := quietKey{r.Level, r.Message}
	s.mu.Lock()
	c := s.seen[k]
	if c == nil {
		if len(s.seen) >= maxTracked {
			clear(s.seen)
		}
		c = &quietCount{start: now}
		s.seen[k] = c
	}
	if now.Sub(c.start) >= s.opts.Window {
		c.start, c.n = now, 0
	}
	if c.n >= s.opts.Burst {
		c.suppressed++
		s.mu.Unlock()
		s.suppressed.Add(1)
		return nil
	}
	c.n++
	held := c.suppressed
	c.suppressed = 0
	s.mu.Unlock()
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("suppressed", held))
	}
	return q.inner.Handle(ctx, r)
}
