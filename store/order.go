package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/google/btree"
)

// orderIndex orders records by (time, key), the time being Store.orderAt
// (createdAt, or the arrival of a record dated far ahead): all of them, per
// group and per author. It lives in memory and is rebuilt from the records
// at Open, like the text index: in badger it would be three more keys to
// write per record, where in memory an entry is a B-tree insert and a few
// dozen bytes per tree.
type orderIndex struct {
	mu       sync.Mutex
	all      *btree.BTreeG[KeyTime]
	byGroup  map[string]*btree.BTreeG[KeyTime]
	byAuthor map[string]*btree.BTreeG[KeyTime]
}

const orderDegree = 32

func lessKeyTime(a, b KeyTime) bool {
	if a.CreatedAt != b.CreatedAt {
		return a.CreatedAt < b.CreatedAt
	}
	return a.Key < b.Key
}

func newOrderIndex() *orderIndex {
	return &orderIndex{
		all:      btree.NewG(orderDegree, lessKeyTime),
		byGroup:  map[string]*btree.BTreeG[KeyTime]{},
		byAuthor: map[string]*btree.BTreeG[KeyTime]{},
	}
}

func (o *orderIndex) add(key string, at int64, group, author string) {
	kt := KeyTime{Key: key, CreatedAt: at}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all.ReplaceOrInsert(kt)
	treeFor(o.byGroup, group).ReplaceOrInsert(kt)
	treeFor(o.byAuthor, author).ReplaceOrInsert(kt)
}

func (o *orderIndex) remove(key string, at int64, group, author string) {
	kt := KeyTime{Key: key, CreatedAt: at}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all.Delete(kt)
	for _, m := range []struct {
		trees map[string]*btree.BTreeG[KeyTime]
		name  string
	}{{o.byGroup, group}, {o.byAuthor, author}} {
		if t := m.trees[m.name]; t != nil {
			t.Delete(kt)
			if t.Len() == 0 {
				delete(m.trees, m.name)
			}
		}
	}
}

func treeFor(m map[string]*btree.BTreeG[KeyTime], name string) *btree.BTreeG[KeyTime] {
	t := m[name]
	if t == nil {
		t = btree.NewG(orderDegree, lessKeyTime)
		m[name] = t
	}
	return t
}

// snapshot returns a copy-on-write clone of the tree a window reads, or nil
// when no record matches its group or author.
func (o *orderIndex) snapshot(w Window) *btree.BTreeG[KeyTime] {
	o.mu.Lock()
	defer o.mu.Unlock()
	var t *btree.BTreeG[KeyTime]
	switch {
	case w.Author != "":
		t = o.byAuthor[w.Author]
	case w.Group != "" || !w.AnyGroup:
		t = o.byGroup[w.Group]
	default:
		t = o.all
	}
	if t == nil {
		return nil
	}
	return t.Clone()
}

// newest copies into buf, up to its capacity, the newest entries of group
// that Scan{Group: group, Reverse: true} visits, in its order, read under
// the lock instead of from a clone: a clone makes the next inserts into
// the tree copy the nodes they touch. full reports that buf was filled (the
// group may hold more).
func (o *orderIndex) newest(group string, buf []KeyTime) (_ []KeyTime, full bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.byGroup[group]
	if t == nil || cap(buf) == 0 {
		return buf, cap(buf) == 0
	}
	// Scan's lower bound, From 0: (0, "") itself and older are not visited.
	t.DescendGreaterThan(KeyTime{}, func(kt KeyTime) bool {
		buf = append(buf, kt)
		return len(buf) < cap(buf)
	})
	return buf, len(buf) == cap(buf)
}

// newestBatch is how many of a group's newest entries Newest reads at
// once, under the order index's lock: enough for the few records its
// callers want when most are accepted.
const newestBatch = 32

// Newest appends to out the n newest records of group that keep accepts,
// newest first: what Scan{Group: group, Reverse: true} with a fn that
// keeps them and stops at n returns, from one view of the group as it is
// after every write acknowledged before the call. keep sees the newest
// records in order; when more than newestBatch are not enough, it may see
// them again, as a Scan made then would show them, and out holds only that
// scan's.
func (s *Store) Newest(ctx context.Context, group string, n int, keep func(KeyTime) bool, out []KeyTime) ([]KeyTime, error) {
	if s.closed.Load() {
		return out, ErrClosed
	}
	if err := s.waitIndexed(ctx); err != nil {
		return out, fmt.Errorf("scanning records: %w", err)
	}
	if n <= 0 {
		return out, nil
	}
	start := len(out)
	var buf [newestBatch]KeyTime
	batch, full := s.order.newest(group, buf[:0])
	for _, kt := range batch {
		if err := ctx.Err(); err != nil {
			return out[:start], fmt.Errorf("scanning records: %w", err)
		}
		if keep(kt) {
			if out = append(out, kt); len(out)-start == n {
				return out, nil
			}
		}
	}
	if !full {
		return out, nil
	}
	// The group holds more than one batch: read it from a snapshot, from
	// the newest again, as one Scan.
	out = out[:start]
	err := s.Scan(ctx, Window{Group: group, Reverse: true}, func(kt KeyTime) error {
		if keep(kt) {
			if out = append(out, kt); len(out)-start == n {
				return errEnough
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return out[:start], err
	}
	return out, nil
}

// Scan calls fn for each record key in the window, ordered by (time, key)
// (see KeyTime), ascending unless Reverse. fn returning an error stops the scan. It
// sees every write acknowledged before it started, and none that commit
// while it runs.
func (s *Store) Scan(ctx context.Context, w Window, fn func(KeyTime) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if w.Author != "" && w.Group != "" {
		return errors.New("scan: choose a group or an author, not both")
	}
	if err := s.waitIndexed(ctx); err != nil {
		return fmt.Errorf("scanning records: %w", err)
	}
	t := s.order.snapshot(w)
	if t == nil {
		return nil
	}
	to := cmp.Or(w.To, math.MaxInt64)
	var err error
	n := 0
	visit := func(kt KeyTime) bool {
		if err = ctx.Err(); err != nil {
			return false
		}
		if err = fn(kt); err != nil {
			return false
		}
		n++
		return w.Limit <= 0 || n < w.Limit
	}
	// Bounds are (time, "") pairs, below every stored key of that
	// instant: From is inclusive, To exclusive.
	lo, hi := KeyTime{CreatedAt: w.From}, KeyTime{CreatedAt: to}
	switch {
	case to == math.MaxInt64 && w.Reverse:
		t.DescendGreaterThan(lo, visit)
	case to == math.MaxInt64:
		t.AscendGreaterOrEqual(lo, visit)
	case w.Reverse:
		t.DescendRange(hi, lo, visit)
	default:
		t.AscendRange(lo, hi, visit)
	}
	if err != nil {
		if err == errEnough {
			return errEnoughScan
		}
		return &scanError{err}
	}
	return nil
}

// scanError is a Scan stopped by err, its fn's or its context's: the
// message and chain fmt.Errorf("scanning records: %w", err) would give
// (callers match err with errors.Is and errors.As), without formatting
// one on every call that stops early.
type scanError struct{ err error }

func (e *scanError) Error() string { return "scanning records: " + e.err.Error() }
func (e *scanError) Unwrap() error { return e.err }

// errEnoughScan is errEnough, which the store's own scans stop with, as
// Scan returns it: made once, as errEnough is.
var errEnoughScan error = &scanError{errEnough}
