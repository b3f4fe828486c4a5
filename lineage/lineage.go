// Package lineage applies the MMP remix rules (spec §15) to records kept by
// package store: computing and validating `parents`/`ancestors`, finding
// missing parents, walking the DAG, and the lineage tether (§15.8).
package lineage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"cmbnode/store"
)

// Graph is what lineage needs from the store; *store.Store satisfies it.
type Graph interface {
	GetLineage(ctx context.Context, key string) (store.Record, error)
	Has(ctx context.Context, key string) (bool, error)
	Children(ctx context.Context, key string) ([]string, error)
}

var _ Graph = (*store.Store)(nil)

// ErrLineage marks a lineage that contradicts the rules or what is stored.
var ErrLineage = errors.New("invalid lineage")

// Ancestors applies §15.2: ancestors = union(parents' ancestors) + parent
// keys. Order is roots first: each parent's ancestors in the order they list
// them, then the parents themselves, duplicates dropped at their first
// occurrence. Nothing is ever truncated. parentAncestors[i] belongs to
// parents[i].
func Ancestors(parents []string, parentAncestors [][]string) []string {
	seen := map[string]struct{}{}
	var out []string
	addAll := func(l []string) {
		for _, k := range l {
			if _, ok := seen[k]; !ok {
				seen[k] = struct{}{}
				out = append(out, k)
			}
		}
	}
	for i := range parents {
		if i < len(parentAncestors) {
			addAll(parentAncestors[i])
		}
	}
	addAll(parents)
	return out
}

// Resolve computes the ancestors of a new remix of parents from what is
// stored, and lists the parents that are not stored (to fetch by key). A
// missing parent still counts as an ancestor, but its own ancestors are
// unknown until it arrives.
func Resolve(ctx context.Context, g Graph, parents []string) (ancestors, missing []string, err error) {
	pa := make([][]string, len(parents))
	for i, p := range parents {
		rec, err := g.GetLineage(ctx, p)
		switch {
		case errors.Is(err, store.ErrNotFound):
			missing = append(missing, p)
		case err != nil:
			return nil, nil, fmt.Errorf("resolving parent %s: %w", p, err)
		default:
			pa[i] = rec.Ancestors
		}
	}
	return Ancestors(parents, pa), missing, nil
}

// MissingParents lists the parents of e that are not stored.
func MissingParents(ctx context.Context, g Graph, parents []string) ([]string, error) {
	var missing []string
	for _, p := range parents {
		ok, err := g.Has(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("looking up parent %s: %w", p, err)
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// Report is the outcome of Validate.
type Report struct {
	// MissingParents are parents not stored locally: fetch them (cmb-fetch)
	// and validate again for a complete check.
	MissingParents []string
	// Problems are rule violations; any makes Validate return ErrLineage.
	Problems []string
}

// Complete reports whether every parent was available for checking.
func (r Report) Complete() bool { return len(r.MissingParents) == 0 }

// Validate checks a record's lineage against §15.2 and what is stored: no
// self-reference or repeated parent, ancestors present exactly when parents
// are, every parent listed among the ancestors, and each stored parent's
// ancestors included. It returns the report and, when there are problems,
// an error wrapping ErrLineage that lists them.
func Validate(ctx context.Context, g Graph, key string, parents, ancestors []string) (Report, error) {
	var r Report
	add := func(f string, a ...any) { r.Problems = append(r.Problems, fmt.Sprintf(f, a...)) }
	anc := make(map[string]struct{}, len(ancestors))
	for _, a := range ancestors {
		if _, dup := anc[a]; dup {
			add("ancestor %s listed twice", a)
		}
		anc[a] = struct{}{}
	}
	if _, self := anc[key]; self && key != "" {
		add("lists itself as an ancestor")
	}
	if len(parents) == 0 && len(ancestors) > 0 {
		add("has ancestors but no parents")
	}
	seen := map[string]struct{}{}
	for _, p := range parents {
		if p == key {
			add("lists itself as a parent")
		}
		if _, dup := seen[p]; dup {
			add("parent %s listed twice", p)
		}
		seen[p] = struct{}{}
		if _, ok := anc[p]; !ok {
			add("parent %s missing from ancestors", p)
		}
		rec, err := g.GetLineage(ctx, p)
		if errors.Is(err, store.ErrNotFound) {
			r.MissingParents = append(r.MissingParents, p)
			continue
		}
		if err != nil {
			return r, fmt.Errorf("validating lineage of %s: reading parent %s: %w", key, p, err)
		}
		for _, a := range rec.Ancestors {
			if _, ok := anc[a]; !ok {
				add("ancestor %s of parent %s missing from ancestors (truncated lineage?)", a, p)
			}
		}
		if slices.Contains(rec.Ancestors, key) && key != "" {
			add("parent %s descends from this record (cycle)", p)
		}
	}
	if len(r.Problems) > 0 {
		return r, fmt.Errorf("%w: %s: %s", ErrLineage, key, strings.Join(r.Problems, "; "))
	}
	return r, nil
}

// Node is one record found by a walk, with its distance in hops.
type Node struct {
	Key       string
	Depth     int
	CreatedAt int64
}

// AncestorsOf walks parent links breadth-first up to maxDepth hops (0 = no
// bound) and returns the stored ancestors nearest first (ties by key).
// Parents that are not stored are not returned and not walked through.
func AncestorsOf(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	return walk(ctx, g, key, maxDepth, func(rec store.Record) ([]string, error) { return rec.Parents, nil })
}

// Descendants walks child links breadth-first up to maxDepth hops (0 = no
// bound) and returns the descendants nearest first (ties by key).
func Descendants(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	return walk(ctx, g, key, maxDepth, func(rec store.Record) ([]string, error) {
		return g.Children(ctx, rec.Key)
	})
}

func walk(ctx context.Context, g Graph, key string, maxDepth int, next func(store.Record) ([]string, error)) ([]Node, error) {
	start, err := g.GetLineage(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("walking lineage of %s: %w", key, err)
	}
	seen := map[string]struct{}{key: {}}
	frontier := []store.Record{start}
	var out []Node
	for depth := 1; len(frontier) > 0 && (maxDepth <= 0 || depth <= maxDepth); depth++ {
		var layer []Node
		var nextFrontier []store.Record
		for _, rec := range frontier {
			keys, err := next(rec)
			if err != nil {
				return nil, fmt.Errorf("walking lineage of %s: %w", key, err)
			}
			for _, k := range keys {
				if _, ok := seen[k]; ok {
					continue
				}
				seen[k] = struct{}{}
				r, err := g.GetLineage(ctx, k)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("walking lineage of %s: %w", key, err)
				}
				layer = append(layer, Node{Key: k, Depth: depth, CreatedAt: r.CreatedAt})
				nextFrontier = append(nextFrontier, r)
			}
		}
		sort.Slice(layer, func(i, j int) bool { return layer[i].Key < layer[j].Key })
		out = append(out, layer...)
		frontier = nextFrontier
	}
	return out, nil
}

// Thread is the episode around a record: its ancestors, itself and its
// descendants (each walk bounded by maxDepth, 0 = unbounded), ordered by
// creation time (ties by key).
func Thread(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	self, err := g.GetLineage(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("building thread of %s: %w", key, err)
	}
	up, err := AncestorsOf(ctx, g, key, maxDepth)
	if err != nil {
		return nil, err
	}
	down, err := Descendants(ctx, g, key, maxDepth)
	if err != nil {
		return nil, err
	}
	all := append(append(up, Node{Key: key, CreatedAt: self.CreatedAt}), down...)
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].CreatedAt != all[j].CreatedAt {
			return all[i].CreatedAt < all[j].CreatedAt
		}
		return all[i].Key < all[j].Key
	})
	return all, nil
}

// ErrNoPath is returned by Distance when the keys are not connected within
// the bound.
var ErrNoPath = errors.New("no lineage path")

// Distance is the number of lineage hops between a and b, following parent
// and child links in either direction (so siblings are 2 apart), searching
// at most maxHops (0 = unbounded). Both keys must be stored.
func Distance(ctx context.Context, g Graph, a, b string, maxHops int) (int, error) {
	if a == b {
		if ok, err := g.Has(ctx, a); err != nil || !ok {
			return 0, fmt.Errorf("distance: %s: %w", a, errors.Join(err, store.ErrNotFound))
		}
		return 0, nil
	}
	for _, k := range []string{a, b} {
		ok, err := g.Has(ctx, k)
		if err != nil {
			return 0, fmt.Errorf("distance: %w", err)
		}
		if !ok {
			return 0, fmt.Errorf("distance: %w: %s", store.ErrNotFound, k)
		}
	}
	// Bidirectional BFS: the frontier grows as branching^(d/2) rather than
	// branching^d, which matters in bushy DAGs.
	type side struct {
		dist     map[string]int
		frontier []string
	}
	sa := &side{dist: map[string]int{a: 0}, frontier: []string{a}}
	sb := &side{dist: map[string]int{b: 0}, frontier: []string{b}}
	neighbours := func(k string) ([]string, error) {
		rec, err := g.GetLineage(ctx, k)
		if err != nil {
			return nil, err
		}
		ch, err := g.Children(ctx, k)
		if err != nil {
			return nil, err
		}
		return append(slices.Clone(rec.Parents), ch...), nil
	}
	for hops := 0; len(sa.frontier) > 0 && len(sb.frontier) > 0; {
		if maxHops > 0 && hops >= maxHops {
			break
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		cur, other := sa, sb
		if len(sb.frontier) < len(sa.frontier) {
			cur, other = sb, sa
		}
		best := -1
		var next []string
		for _, k := range cur.frontier {
			ns, err := neighbours(k)
			if err != nil {
				return 0, fmt.Errorf("distance: %w", err)
			}
			for _, n := range ns {
				if _, ok := cur.dist[n]; ok {
					continue
				}
				if ok, err := g.Has(ctx, n); err != nil {
					return 0, fmt.Errorf("distance: %w", err)
				} else if !ok {
					continue
				}
				cur.dist[n] = cur.dist[k] + 1
				if od, ok := other.dist[n]; ok {
					if d := cur.dist[n] + od; best < 0 || d < best {
						best = d
					}
				}
				next = append(next, n)
			}
		}
		if best >= 0 {
			if maxHops > 0 && best > maxHops {
				break
			}
			return best, nil
		}
		cur.frontier = next
		hops++
	}
	return 0, fmt.Errorf("%w between %s and %s within %d hops", ErrNoPath, a, b, maxHops)
}
