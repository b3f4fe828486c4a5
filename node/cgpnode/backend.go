package cgpnode

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/cgp"
)

// Backend serves a node's records to the Context Graph Protocol engine.
type Backend struct {
	n     *node.Node
	cache decodedCache
}

var (
	_ cgp.Backend        = (*Backend)(nil)
	_ cgp.VectorSearcher = (*Backend)(nil)
	_ cgp.SyncReporter   = (*Backend)(nil)
)

// Syncing reports the node's catch-up in progress (cgp.SyncReporter).
func (b *Backend) Syncing() (cgp.SyncNotice, bool) {
	p := b.n.Sync()
	if !p.Syncing {
		return cgp.SyncNotice{}, false
	}
	return cgp.SyncNotice{
		Note:     fmt.Sprintf("still catching up with peers: %d of about %d records received; this answer may lack some", p.Received, p.Expected),
		Received: p.Received, Expected: p.Expected, Peers: p.Peers,
	}, true
}

// NewBackend returns n's records as a cgp.Backend.
func NewBackend(n *node.Node) *Backend { return &Backend{n: n} }

// Search ranks as recall does (node.SearchText: text relevance with lineage
// neighbours' evidence, already on a fixed [0,1] scale) and maps it onto the
// engine's [0,1] score by blending in recency relative to the newest record
// held (cgp.RankScore), so a query's ranking does not drift with the wall
// clock, and a hit's score does not depend on which other records matched.
func (b *Backend) Search(ctx context.Context, text string, opts cgp.SearchOptions) (cgp.SearchResult, error) {
	return b.search(ctx, text, nil, opts)
}

// SearchVector is Search with the host's query embedding in the node's
// dense kernel (the engine has checked its length against the declared
// fingerprint): it stands in for encoding the text.
func (b *Backend) SearchVector(ctx context.Context, text string, vec []float64, opts cgp.SearchOptions) (cgp.SearchResult, error) {
	return b.search(ctx, text, vec, opts)
}

func (b *Backend) search(ctx context.Context, text string, vec []float64, opts cgp.SearchOptions) (cgp.SearchResult, error) {
	limit := max(opts.Limit, 1)
	var asOf time.Time
	if opts.AsOf != nil {
		asOf = *opts.AsOf
	}
	var hits []node.TextHit
	var err error
	if vec != nil {
		hits, err = b.n.SearchVector(ctx, text, vec, limit+1, asOf)
	} else {
		hits, err = b.n.SearchText(ctx, text, limit+1, asOf)
	}
	if err != nil {
		return cgp.SearchResult{}, err
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
	newest, err := b.n.Newest(ctx)
	if err != nil {
		return cgp.SearchResult{}, err
	}
	for _, h := range hits {
		res.Hits = append(res.Hits, cgp.Hit{Key: h.Key, Score: cgp.RankScore(h.Relevance, h.CreatedAt, newest)})
	}
	return res, nil
}

// Get returns one held record as the engine's view. The store is read every
// time (the record may have been purged, its stored time is local); what is
// derived from the record's bytes alone comes from the backend's cache. A
// quarantined record is not held, as far as CGP is concerned.
func (b *Backend) Get(ctx context.Context, key string) (cgp.Record, bool, error) {
	r, err := b.n.GetRaw(ctx, key)
	if errors.Is(err, node.ErrNotFound) {
		return cgp.Record{}, false, nil
	}
	if err != nil {
		return cgp.Record{}, false, err
	}
	sum := sha256.Sum256(r.Raw)
	d, ok := b.cache.get(key, &sum)
	if !ok {
		if d, err = decodeForCGP(r.Raw); err != nil {
			return cgp.Record{}, false, fmt.Errorf("stored record %s does not decode: %w", key, err)
		}
		d.sum = sum
		b.cache.put(key, d)
	}
	out := d.rec
	// Callers own what they get: nothing shared with the cache.
	out.Parents = slices.Clone(d.rec.Parents)
	out.Fields.Valence, out.Fields.Arousal = clonePtr(d.rec.Fields.Valence), clonePtr(d.rec.Fields.Arousal)
	out.AuthorName = b.n.AuthorName(ctx, out.CreatedBy)
	out.StoredAt, out.Raw, out.RawDigest = r.StoredAt, r.Raw, d.digest
	out.KeyUnconfirmed = !b.n.KeyConfirmed(ctx, out.CreatedBy, r.Source)
	out.Hidden = b.n.Hidden(key)
	return out, true, nil
}

// decodeForCGP decodes a stored record and computes its provenance digest:
// the two costly steps of Get, which depend on the bytes alone.
func decodeForCGP(raw []byte) (*decodedRecord, error) {
	rec, err := cmb.Decode(raw)
	if err != nil {
		return nil, err
	}
	f := &rec.Fields
	d := &decodedRecord{rec: cgp.Record{
		Key: rec.Key, Group: rec.Group, CreatedBy: rec.CreatedBy, CreatedAt: time.UnixMilli(rec.CreatedAt),
		Fields: cgp.Fields{
			Focus: f[cmb.Focus].Text, Issue: f[cmb.Issue].Text, Intent: f[cmb.Intent].Text,
			Motivation: f[cmb.Motivation].Text, Commitment: f[cmb.Commitment].Text,
			Perspective: f[cmb.Perspective].Text, Mood: f[cmb.Mood].Text,
			Valence: f[cmb.Mood].Valence, Arousal: f[cmb.Mood].Arousal,
		},
		Parents: rec.Parents(),
	}}
	if p := cgp.RecordDigest(raw); p != nil {
		d.digest = *p
	}
	return d, nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// decodedRecord is what Get derives from a record's bytes: the decoded
// view (without the node-local author name, stored time and raw bytes) and
// the provenance digest, which JCS-canonicalises the record.
type decodedRecord struct {
	sum    [sha256.Size]byte // SHA-256 of the bytes it was derived from
	rec    cgp.Record
	digest string
}

// decodedCache remembers decoded records and their provenance digests by
// key, because decoding and canonicalising are the costly part of reading a
// record and a query reads the same records repeatedly (hits, their threads
// and relations). An entry is used only for the very bytes it was made from (by SHA-256), so a
// key purged and later stored again with other bytes is decoded afresh.
// Two generations bound it: when the current one fills it becomes the old
// one, and entries found there move back to the current one.
type decodedCache struct {
	mu       sync.Mutex
	cur, old map[string]*decodedRecord
}

const maxDecoded = 8192 // per generation, ~1 KB each

func (c *decodedCache) get(key string, sum *[sha256.Size]byte) (*decodedRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.cur[key]
	if !ok {
		if d, ok = c.old[key]; ok && d.sum == *sum {
			delete(c.old, key)
			c.putLocked(key, d)
		}
	}
	if !ok || d.sum != *sum {
		return nil, false
	}
	return d, true
}

func (c *decodedCache) put(key string, d *decodedRecord) {
	c.mu.Lock()
	c.putLocked(key, d)
	c.mu.Unlock()
}

func (c *decodedCache) putLocked(key string, d *decodedRecord) {
	if c.cur == nil || len(c.cur) >= maxDecoded {
		c.old, c.cur = c.cur, make(map[string]*decodedRecord, 1024)
	}
	c.cur[key] = d
}

// Children lists held, unquarantined records naming key as a parent.
func (b *Backend) Children(ctx context.Context, key string) ([]string, error) {
	return b.n.Children(ctx, key)
}
