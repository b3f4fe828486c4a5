package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"cmbnode/cmb"
	"cmbnode/node/cgp"
	"cmbnode/store"
)

// CGPBackend serves the node's store to the Context Graph Protocol engine.
type CGPBackend struct{ n *Node }

var _ cgp.Backend = CGPBackend{}

// CGPBackend returns the node's store as a cgp.Backend.
func (n *Node) CGPBackend() CGPBackend { return CGPBackend{n} }

// Search ranks with the store's BM25 and maps the result onto the engine's
// [0,1] score: text relevance relative to the best hit, blended with recency
// relative to the newest record held (cgp.RankScore), so a query's ranking
// does not drift with the wall clock.
func (b CGPBackend) Search(ctx context.Context, text string, opts cgp.SearchOptions) (cgp.SearchResult, error) {
	limit := max(opts.Limit, 1)
	so := store.SearchOptions{Limit: limit + 1}
	if opts.AsOf != nil {
		so.AsOf = *opts.AsOf
	}
	hits, err := b.n.st.Search(ctx, text, so)
	if err != nil {
		return cgp.SearchResult{}, fmt.Errorf("search store: %w", err)
	}
	// One hit beyond the limit proves more matched than are returned: a
	// lower bound for Total keeps `truncated` honest without counting all.
	total := len(hits)
	if len(hits) > limit {
		hits = hits[:limit]
	}
	res := cgp.SearchResult{Hits: make([]cgp.Hit, 0, len(hits)), Total: total}
	if len(hits) == 0 {
		return res, nil
	}
	var best float64
	for _, h := range hits {
		best = max(best, h.Text)
	}
	newest, err := b.newest(ctx)
	if err != nil {
		return cgp.SearchResult{}, err
	}
	for _, h := range hits {
		rel := 0.0
		if best > 0 {
			rel = h.Text / best
		}
		res.Hits = append(res.Hits, cgp.Hit{Key: h.Key, Score: cgp.RankScore(rel, time.UnixMilli(h.CreatedAt), newest)})
	}
	return res, nil
}

func (b CGPBackend) newest(ctx context.Context) (time.Time, error) {
	kt, err := b.n.st.Recent(ctx, "", 1)
	if err != nil {
		return time.Time{}, fmt.Errorf("newest record: %w", err)
	}
	if len(kt) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(kt[0].CreatedAt), nil
}

// Get returns one held record as the engine's view.
func (b CGPBackend) Get(ctx context.Context, key string) (cgp.Record, bool, error) {
	r, err := b.n.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return cgp.Record{}, false, nil
	}
	if err != nil {
		return cgp.Record{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	rec, err := cmb.Decode(r.Raw)
	if err != nil {
		return cgp.Record{}, false, fmt.Errorf("stored record %s does not decode: %w", key, err)
	}
	name := ""
	if strings.EqualFold(rec.CreatedBy, b.n.id.NodeID) {
		name = b.n.id.Name
	} else if p, err := b.n.st.GetPeer(ctx, strings.ToLower(rec.CreatedBy)); err == nil {
		name = p.Name
	}
	f := &rec.Fields
	return cgp.Record{
		Key: rec.Key, Group: rec.Group, CreatedBy: rec.CreatedBy, AuthorName: name,
		CreatedAt: time.UnixMilli(rec.CreatedAt), StoredAt: r.Meta.StoredAt,
		Fields: cgp.Fields{
			Focus: f[cmb.Focus].Text, Issue: f[cmb.Issue].Text, Intent: f[cmb.Intent].Text,
			Motivation: f[cmb.Motivation].Text, Commitment: f[cmb.Commitment].Text,
			Perspective: f[cmb.Perspective].Text, Mood: f[cmb.Mood].Text,
			Valence: f[cmb.Mood].Valence, Arousal: f[cmb.Mood].Arousal,
		},
		Parents: rec.Parents(), Raw: r.Raw, RawDigest: b.n.digests.get(key, r.Raw),
	}, true, nil
}

// digestCache remembers provenance digests: a key's bytes never change, and
// JCS-canonicalising a record on every query is the dominant rendering cost.
type digestCache struct {
	mu sync.Mutex
	m  map[string]string
}

const maxDigests = 100_000 // ~10 MB; cleared wholesale when full

func (c *digestCache) get(key string, raw []byte) string {
	c.mu.Lock()
	d, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return d
	}
	p := cgp.RecordDigest(raw)
	if p == nil {
		return ""
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxDigests {
		c.m = make(map[string]string)
	}
	c.m[key] = *p
	c.mu.Unlock()
	return *p
}

// Children lists held records naming key as a parent.
func (b CGPBackend) Children(ctx context.Context, key string) ([]string, error) {
	c, err := b.n.st.Children(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("children of %s: %w", key, err)
	}
	return c, nil
}
