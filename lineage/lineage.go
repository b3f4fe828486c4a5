// Package lineage applies the MMP remix rules (spec §15) to records kept by
// package store: computing and validating `parents`/`ancestors`, finding
// missing parents, and the lineage tether (§15.8). Walks of the DAG are
// package walk's; View serves the store to them.
package lineage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/lineage/walk"
	"github.com/cmbnode/cmbnode/store"
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
	var all []string
	for i := range parents {
		if i < len(parentAncestors) {
			all = append(all, parentAncestors[i]...)
		}
	}
	return Dedupe(append(all, parents...))
}

// Dedupe returns keys with each repeat dropped at its first occurrence, the
// order §15.2 lists ancestors in and a remix's parents keep.
func Dedupe(keys []string) []string {
	seen := make(map[string]struct{}, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
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
type Node = walk.Node

// View serves a store to the lineage walks of package walk. Quarantined
// records are walked like any other: filtering is the caller's policy.
func View(g Graph) walk.Graph { return storeView{g} }

type storeView struct{ g Graph }

func (v storeView) Vertex(ctx context.Context, key string) (walk.Vertex, bool, error) {
	rec, err := v.g.GetLineage(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return walk.Vertex{}, false, nil
	}
	if err != nil {
		return walk.Vertex{}, false, err
	}
	return walk.Vertex{Key: key, CreatedAt: time.UnixMilli(rec.CreatedAt), Parents: rec.Parents}, true, nil
}

func (v storeView) Children(ctx context.Context, key string) ([]string, error) {
	return v.g.Children(ctx, key)
}

// IndexedGraph is the store's in-memory lineage (store.Store.IndexedLineage).
type IndexedGraph interface {
	IndexedLineage(ctx context.Context, key string) (store.LineageNode, bool, error)
}

// IndexedView serves the store's in-memory lineage to the walks: the same
// edges as View, read without touching badger, over the records the store
// surfaces (quarantined and forgotten ones are not in it), each at its
// order time (store.KeyTime). Rankers that walk the thread of every
// candidate use it.
func IndexedView(g IndexedGraph) walk.Graph { return indexedView{g} }

type indexedView struct{ g IndexedGraph }

func (v indexedView) Vertex(ctx context.Context, key string) (walk.Vertex, bool, error) {
	n, ok, err := v.g.IndexedLineage(ctx, key)
	if err != nil || !ok {
		return walk.Vertex{}, false, err
	}
	return walk.Vertex{Key: key, CreatedAt: time.UnixMilli(n.At), Parents: n.Parents}, true, nil
}

func (v indexedView) Children(ctx context.Context, key string) ([]string, error) {
	n, ok, err := v.g.IndexedLineage(ctx, key)
	if err != nil || !ok {
		return nil, err
	}
	return n.Children, nil
}

// AncestorsOf is walk.Ancestors over a store: the stored ancestors within
// maxDepth hops (0 = no bound), nearest first (ties by key).
func AncestorsOf(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	return walk.Ancestors(ctx, View(g), key, maxDepth)
}

// Descendants is walk.Descendants over a store: the stored descendants
// within maxDepth hops (0 = no bound), nearest first (ties by key).
func Descendants(ctx context.Context, g Graph, key string, maxDepth int) ([]Node, error) {
	return walk.Descendants(ctx, View(g), key, maxDepth)
}
