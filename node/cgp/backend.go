package cgp

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/cmbnode/cmbnode/lineage/walk"
)

// Backend is what the CGP layer needs from the node's store. The daemon
// implements it over badger; MemBackend implements it in memory for tests.
// Implementations must be safe for concurrent use. Errors are reported to
// the host as `unavailable` (the store may come back), so return them
// wrapped rather than panicking.
type Backend interface {
	// Search ranks stored records against free text, best first. Each hit's
	// Score in [0,1] combines text relevance and recency (RankScore is the
	// formula MemBackend uses). Records that match no term are not hits.
	// With opts.AsOf set, only records whose valid-time window contains it
	// (CreatedAt <= AsOf < ValidTo) are hits. At most opts.Limit hits are
	// returned; Total is the number that matched before the limit, which is
	// what keeps `truncated` truthful.
	Search(ctx context.Context, text string, opts SearchOptions) (SearchResult, error)
	// Get returns one record by key; ok is false if it is not held.
	Get(ctx context.Context, key string) (rec Record, ok bool, err error)
	// Children returns the keys of held records naming key as a parent,
	// in any order.
	Children(ctx context.Context, key string) ([]string, error)
}

// lineageView serves a Backend to the lineage walks and keeps each record
// it reads, so the engine renders what a walk reached without reading it
// again. It serves one walk: not safe for concurrent use.
type lineageView struct {
	b    Backend
	read map[string]Record
	// limit, if above 0, is how many records the view reads: past it, a
	// record not yet read is reported not held (and noted in unread), so
	// a walk over the view ends there.
	limit  int
	unread map[string]bool
}

// newLineageView starts a view that already holds known.
func newLineageView(b Backend, known ...Record) *lineageView {
	v := &lineageView{b: b, read: make(map[string]Record, len(known))}
	for _, r := range known {
		v.read[r.Key] = r
	}
	return v
}

func (v *lineageView) Vertex(ctx context.Context, key string) (walk.Vertex, bool, error) {
	r, ok := v.read[key]
	if !ok {
		// A walk reads many records per step: each read checks the
		// deadline, so none is made once it has passed.
		if err := ctx.Err(); err != nil {
			return walk.Vertex{}, false, err
		}
		if v.limit > 0 && len(v.read) >= v.limit {
			if v.unread == nil {
				v.unread = map[string]bool{}
			}
			v.unread[key] = true
			return walk.Vertex{}, false, nil
		}
		var err error
		if r, ok, err = v.b.Get(ctx, key); err != nil || !ok {
			return walk.Vertex{}, false, err
		}
		v.read[key] = r
	}
	return walk.Vertex{Key: key, CreatedAt: r.CreatedAt, Parents: r.Parents}, true, nil
}

func (v *lineageView) Children(ctx context.Context, key string) ([]string, error) {
	return v.b.Children(ctx, key)
}

// SyncReporter is a Backend that knows when it is still receiving records
// (a node catching up with its peers); answers given meanwhile carry a
// SyncNotice.
type SyncReporter interface {
	Syncing() (SyncNotice, bool)
}

// SearchOptions bounds a Search.
type SearchOptions struct {
	Limit int
	AsOf  *time.Time
}

// SearchResult is a ranked page of hits.
type SearchResult struct {
	Hits  []Hit
	Total int
}

// Hit is one ranked record.
type Hit struct {
	Key   string
	Score float64
}

// Record is a plain, read-only view of one stored CMB: what a frame needs
// and nothing the CGP layer would have to interpret from MMP itself.
type Record struct {
	Key        string
	Group      string // the CMB's group; empty for legacy records
	CreatedBy  string // author nodeId
	AuthorName string // author display name if known, else ""
	CreatedAt  time.Time
	StoredAt   time.Time // when this node stored it (recorded_at)
	// ValidTo, if non-zero, is when the store learned the record stopped
	// being true (superseded or retracted). Zero means open-ended.
	ValidTo time.Time
	Fields  Fields
	Parents []string
	// Raw is the record JSON as received; the provenance digest is SHA-256
	// over its JCS canonical form, so a host holding the record can check it.
	Raw []byte
	// RawDigest, if set, is RecordDigest(Raw) computed once when stored;
	// canonicalising on every query is the dominant rendering cost.
	RawDigest string
	// KeyUnconfirmed marks lower provenance: the author's key is known only
	// from the gossiped frames that carried its records, not a handshake.
	KeyUnconfirmed bool
	// Hidden marks a record the backend's surfacing policy keeps out of
	// listings (cmbnode: an SVAF verdict not surfaced): it is served when
	// asked for itself (its memory frame, its own episode, an anchor), never
	// as a member of another record's episode or a lineage neighbour of an
	// anchor.
	Hidden bool
}

// Fields are the seven CAT7 field texts plus the mood's affect numbers.
type Fields struct {
	Focus, Issue, Intent, Motivation, Commitment, Perspective, Mood string
	Valence, Arousal                                                *float64
}

// RecencyHalfLife is how fast recency decays in RankScore: a record this
// much older than the newest one held counts half as recent.
const RecencyHalfLife = 30 * 24 * time.Hour

// RankScore combines text relevance in [0,1] with recency relative to the
// newest record held (not the wall clock, so ranking is reproducible).
// Relevance dominates; recency breaks near-ties.
func RankScore(relevance float64, createdAt, newest time.Time) float64 {
	age := newest.Sub(createdAt)
	if age < 0 {
		age = 0
	}
	recency := math.Exp2(-float64(age) / float64(RecencyHalfLife))
	return clamp01(0.75*relevance + 0.25*recency)
}

func clamp01(f float64) float64 {
	if math.IsNaN(f) || f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}

// Terms splits text into lowercase search terms of letters and digits.
// Terms shorter than two runes are dropped: they match everything.
func Terms(text string) []string {
	f := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	})
	out := f[:0]
	seen := map[string]bool{}
	for _, t := range f {
		if len([]rune(t)) < 2 || seen[t] {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	return out
}

// MemBackend is an in-memory Backend for tests and tools. Search scores a
// record by the fraction of query terms found in its field texts and author
// name, then applies RankScore.
type MemBackend struct {
	mu       sync.RWMutex
	recs     map[string]*memRec
	children map[string][]string
	postings map[string][]string // term -> keys, an inverted index
	newest   time.Time
}

type memRec struct {
	rec   Record
	terms map[string]bool
}

// NewMemBackend returns an empty MemBackend.
func NewMemBackend() *MemBackend {
	return &MemBackend{recs: map[string]*memRec{}, children: map[string][]string{}, postings: map[string][]string{}}
}

// Put stores or replaces a record. Replacing lets tests change a record's
// rendering (e.g. the author's display name) to exercise `stale`.
func (m *MemBackend) Put(r Record) error {
	if r.Key == "" {
		return fmt.Errorf("cgp: MemBackend.Put: record has no key")
	}
	if r.RawDigest == "" {
		if d := RecordDigest(r.Raw); d != nil {
			r.RawDigest = *d
		}
	}
	terms := map[string]bool{}
	f := r.Fields
	for _, t := range Terms(strings.Join([]string{f.Focus, f.Issue, f.Intent, f.Motivation, f.Commitment, f.Perspective, f.Mood, r.AuthorName}, " ")) {
		terms[t] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unlink(r.Key)
	m.recs[r.Key] = &memRec{rec: r, terms: terms}
	for _, p := range r.Parents {
		m.children[p] = append(m.children[p], r.Key)
	}
	for t := range terms {
		m.postings[t] = append(m.postings[t], r.Key)
	}
	if r.CreatedAt.After(m.newest) {
		m.newest = r.CreatedAt
	}
	return nil
}

// Delete removes a record, as retention would; its frames become `gone`.
func (m *MemBackend) Delete(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unlink(key)
}

// unlink removes key from the record map and every index; m.mu is held.
func (m *MemBackend) unlink(key string) {
	old, ok := m.recs[key]
	if !ok {
		return
	}
	is := func(k string) bool { return k == key }
	for _, p := range old.rec.Parents {
		m.children[p] = slices.DeleteFunc(m.children[p], is)
	}
	for t := range old.terms {
		m.postings[t] = slices.DeleteFunc(m.postings[t], is)
	}
	delete(m.recs, key)
}

// Len reports how many records are held.
func (m *MemBackend) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.recs)
}

// Search implements Backend.
func (m *MemBackend) Search(ctx context.Context, text string, opts SearchOptions) (SearchResult, error) {
	terms := Terms(text)
	if len(terms) == 0 {
		return SearchResult{Hits: []Hit{}}, nil
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	matched := map[string]int{}
	for _, t := range terms {
		for _, k := range m.postings[t] {
			matched[k]++
		}
	}
	if err := ctx.Err(); err != nil {
		return SearchResult{}, fmt.Errorf("cgp: MemBackend.Search: %w", err)
	}
	hits := make([]Hit, 0, len(matched))
	for key, n := range matched {
		r := m.recs[key]
		if opts.AsOf != nil && !ValidAt(r.rec, *opts.AsOf) {
			continue
		}
		hits = append(hits, Hit{Key: key, Score: RankScore(float64(n)/float64(len(terms)), r.rec.CreatedAt, m.newest)})
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	total := len(hits)
	if opts.Limit > 0 && len(hits) > opts.Limit {
		hits = hits[:opts.Limit]
	}
	return SearchResult{Hits: hits, Total: total}, nil
}

// Get implements Backend.
func (m *MemBackend) Get(_ context.Context, key string) (Record, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.recs[key]
	if !ok {
		return Record{}, false, nil
	}
	return r.rec, true, nil
}

// Children implements Backend.
func (m *MemBackend) Children(_ context.Context, key string) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.children[key]), nil
}

// ValidAt reports whether asOf falls in the record's half-open valid-time
// window [CreatedAt, ValidTo) (Q2), compared as instants.
// Both bounds are taken at the millisecond precision frames carry, so a host
// checking the emitted valid_from/valid_to reaches the same answer.
func ValidAt(r Record, asOf time.Time) bool {
	if r.CreatedAt.Truncate(time.Millisecond).After(asOf) {
		return false
	}
	return r.ValidTo.IsZero() || asOf.Before(r.ValidTo.Truncate(time.Millisecond))
}
