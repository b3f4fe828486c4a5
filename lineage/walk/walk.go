// Package walk traverses the lineage DAG (MMP §15) through a key-level view
// of a store: the breadth-first walk that episode threads, ancestor and
// descendant listings and hop distances are all built from. It knows
// nothing of how records are kept, so the badger store (through package
// lineage) and the CGP backend serve the same walk.
package walk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Graph is the view of a store a walk reads. A key that is not held is
// reported with ok=false, not an error. Children may name keys that are
// not held; the walk skips them. Walks read the graph from one goroutine.
type Graph interface {
	Vertex(ctx context.Context, key string) (v Vertex, ok bool, err error)
	Children(ctx context.Context, key string) ([]string, error)
}

// Vertex is what a walk needs of one held record.
type Vertex struct {
	Key       string
	CreatedAt time.Time // the author's creation time: orders and cuts walks
	Parents   []string
}

// Node is a record reached by a walk, Depth hops from where it started.
type Node struct {
	Key       string
	Depth     int
	CreatedAt time.Time
}

var (
	// ErrNotHeld is returned when a walk starts from, or measures to, a
	// key the graph does not hold.
	ErrNotHeld = errors.New("record not held")
	// ErrNoPath is returned by Distance when the keys are not connected
	// within the bound.
	ErrNoPath = errors.New("no lineage path")
)

// ThreadOptions bound a Thread. Zero values mean no bound.
type ThreadOptions struct {
	MaxDepth   int // hops from the focal record, each way
	MaxMembers int // members, the focal record included
	// AsOf tells the thread as it stood then: records created after it are
	// neither members nor walked through. Creation times are compared at
	// the millisecond precision MMP records carry.
	AsOf *time.Time
}

// Thread is the episode around a record: itself, its ancestors (walking
// parent links only) and its descendants (child links only), reached
// breadth-first and nearest first. Within one hop, the two directions take
// turns, ancestors before descendants, and each record's relatives are
// taken oldest first (ties by key); so when MaxMembers cuts the walk short
// it keeps the nearest and, among equally near, the oldest. The members
// are returned in creation order (ties by key). A focal record created
// after AsOf has no thread: the result is empty.
func Thread(ctx context.Context, g Graph, key string, o ThreadOptions) ([]Node, error) {
	focal, err := start(ctx, g, key)
	if err != nil {
		return nil, fmt.Errorf("thread of %s: %w", key, err)
	}
	if cut(focal, o.AsOf) {
		return nil, nil
	}
	b := bounds{maxDepth: o.MaxDepth, maxNodes: o.MaxMembers, asOf: o.AsOf}
	nodes, err := search(ctx, g, []step{{focal, 0, up}, {focal, 0, down}}, b)
	if err != nil {
		return nil, fmt.Errorf("thread of %s: %w", key, err)
	}
	slices.SortFunc(nodes, func(a, b Node) int { return byTime(a.CreatedAt, a.Key, b.CreatedAt, b.Key) })
	return nodes, nil
}

// Ancestors walks parent links up to maxDepth hops (0 = no bound) and
// returns the held ancestors nearest first (ties by key). Parents that are
// not held are neither returned nor walked through.
func Ancestors(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	return directed(ctx, g, key, maxDepth, up)
}

// Descendants walks child links up to maxDepth hops (0 = no bound) and
// returns the held descendants nearest first (ties by key).
func Descendants(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	return directed(ctx, g, key, maxDepth, down)
}

func directed(ctx context.Context, g Graph, key string, maxDepth int, d dir) ([]Node, error) {
	v, err := start(ctx, g, key)
	if err != nil {
		return nil, fmt.Errorf("walking lineage of %s: %w", key, err)
	}
	nodes, err := search(ctx, g, []step{{v, 0, d}}, bounds{maxDepth: maxDepth})
	if err != nil {
		return nil, fmt.Errorf("walking lineage of %s: %w", key, err)
	}
	return nearestFirst(nodes[1:]), nil
}

// Hops finds the held records within maxHops lineage hops (0 = no bound)
// of any key in from, following parent and child links in either
// direction, so siblings are 2 apart. Each is returned once, at its
// distance from the nearest key of from; keys of from that are held are
// included at depth 0, the others are ignored. Nearest first, ties by key.
func Hops(ctx context.Context, g Graph, from []string, maxHops int) ([]Node, error) {
	var starts []step
	for _, k := range from {
		v, ok, err := g.Vertex(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("lineage hops from %s: %w", k, err)
		}
		if ok {
			starts = append(starts, step{v, 0, either})
		}
	}
	nodes, err := search(ctx, g, starts, bounds{maxDepth: maxHops})
	if err != nil {
		return nil, fmt.Errorf("lineage hops: %w", err)
	}
	return nearestFirst(nodes), nil
}

// Distance is the number of lineage hops between a and b, following parent
// and child links in either direction (so siblings are 2 apart), searching
// at most maxHops (0 = no bound). Both keys must be held.
func Distance(ctx context.Context, g Graph, a, b string, maxHops int) (int, error) {
	va, err := start(ctx, g, a)
	if err != nil {
		return 0, fmt.Errorf("distance: %w", err)
	}
	if _, err := start(ctx, g, b); err != nil {
		return 0, fmt.Errorf("distance: %w", err)
	}
	if a == b {
		return 0, nil
	}
	nodes, err := search(ctx, g, []step{{va, 0, either}}, bounds{maxDepth: maxHops, target: b})
	if err != nil {
		return 0, fmt.Errorf("distance: %w", err)
	}
	if last := nodes[len(nodes)-1]; last.Key == b {
		return last.Depth, nil
	}
	return 0, fmt.Errorf("%w between %s and %s within %d hops", ErrNoPath, a, b, maxHops)
}

// dir is which links a walk follows from a record.
type dir uint8

const (
	up     dir = 1 << iota // parents
	down                   // children
	either = up | down
)

// step is a record queued for expansion, with the links to follow from it.
type step struct {
	v     Vertex
	depth int
	d     dir
}

// bounds limit a search. Zero values mean no bound.
type bounds struct {
	maxDepth int
	maxNodes int // nodes returned, the starting records included
	asOf     *time.Time
	target   string // stop as soon as this key is reached
}

// search is the one breadth-first walk. The starting records are returned
// first (once each, at depth 0), then every record reached in the order it
// was reached: a FIFO queue of steps, each expanded to its relatives
// oldest first. A record is reached once (the first, hence shortest, way)
// and keeps following the links that reached it, so a walk that starts up
// stays among ancestors. Records cut by asOf are not marked reached: they
// are skipped again on every path that meets them.
func search(ctx context.Context, g Graph, starts []step, b bounds) ([]Node, error) {
	seen := make(map[string]bool, len(starts))
	var out []Node
	for _, s := range starts {
		if !seen[s.v.Key] {
			seen[s.v.Key] = true
			out = append(out, Node{Key: s.v.Key, CreatedAt: s.v.CreatedAt})
		}
	}
	full := func() bool { return b.maxNodes > 0 && len(out) >= b.maxNodes }
	queue := slices.Clone(starts)
	for len(queue) > 0 && !full() {
		s := queue[0]
		queue = queue[1:]
		if b.maxDepth > 0 && s.depth >= b.maxDepth {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		next, err := relatives(ctx, g, s.v, s.d, seen)
		if err != nil {
			return nil, err
		}
		for _, v := range next {
			if seen[v.Key] || cut(v, b.asOf) {
				continue
			}
			seen[v.Key] = true
			out = append(out, Node{Key: v.Key, Depth: s.depth + 1, CreatedAt: v.CreatedAt})
			if v.Key == b.target && b.target != "" {
				return out, nil
			}
			queue = append(queue, step{v, s.depth + 1, s.d})
			if full() {
				break
			}
		}
	}
	return out, nil
}

// relatives are the held records one link from v in direction d that are
// not yet reached, oldest first (ties by key) whatever order the store
// keeps them in. Reached records are not read again.
func relatives(ctx context.Context, g Graph, v Vertex, d dir, reached map[string]bool) ([]Vertex, error) {
	var keys []string
	if d&up != 0 {
		keys = v.Parents
	}
	if d&down != 0 {
		kids, err := g.Children(ctx, v.Key)
		if err != nil {
			return nil, fmt.Errorf("children of %s: %w", v.Key, err)
		}
		keys = append(slices.Clone(keys), kids...)
	}
	out := make([]Vertex, 0, len(keys))
	for _, k := range keys {
		if reached[k] {
			continue
		}
		r, ok, err := g.Vertex(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("relative %s of %s: %w", k, v.Key, err)
		}
		if ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Vertex) int { return byTime(a.CreatedAt, a.Key, b.CreatedAt, b.Key) })
	return out, nil
}

func start(ctx context.Context, g Graph, key string) (Vertex, error) {
	v, ok, err := g.Vertex(ctx, key)
	if err != nil {
		return Vertex{}, err
	}
	if !ok {
		return Vertex{}, fmt.Errorf("%w: %s", ErrNotHeld, key)
	}
	return v, nil
}

// cut reports whether v was created after asOf, at millisecond precision.
func cut(v Vertex, asOf *time.Time) bool {
	return asOf != nil && v.CreatedAt.Truncate(time.Millisecond).After(*asOf)
}

func byTime(at time.Time, ak string, bt time.Time, bk string) int {
	return cmp.Or(at.Compare(bt), strings.Compare(ak, bk))
}

// nearestFirst orders nodes by depth, then key: the order does not depend
// on how the store lists children.
func nearestFirst(nodes []Node) []Node {
	slices.SortFunc(nodes, func(a, b Node) int {
		return cmp.Or(cmp.Compare(a.Depth, b.Depth), strings.Compare(a.Key, b.Key))
	})
	return nodes
}
