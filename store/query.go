package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	badger "github.com/dgraph-io/badger/v4"
)

// Get returns the record stored under key, Raw byte for byte as received.
func (s *Store) Get(ctx context.Context, key string) (Record, error) {
	return s.get(ctx, key, true)
}

// GetLineage is Get without Raw, for graph walks that touch many records.
func (s *Store) GetLineage(ctx context.Context, key string) (Record, error) {
	return s.get(ctx, key, false)
}

func (s *Store) get(ctx context.Context, key string, withRaw bool) (Record, error) {
	if s.closed.Load() {
		return Record{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	if err := s.waitApplied(ctx); err != nil {
		return Record{}, err
	}
	var rec Record
	read := func(txn *badger.Txn) error {
		it, err := txn.Get(recKey(key))
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		if err != nil {
			return err
		}
		if v, err = s.readPointer(v); err != nil {
			return err
		}
		var derr error
		rec, derr = decodeRecord(key, v, withRaw)
		if derr != nil {
			return fmt.Errorf("%w: %v", ErrCorrupted, derr)
		}
		return nil
	}
	err := s.view(read)
	if errors.Is(err, errSegmentGone) {
		// Compaction moved the record between the lookup and the read.
		err = s.view(read)
	}
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading %s: %w", key, err)
	}
	return rec, nil
}

// Has reports whether key is stored.
func (s *Store) Has(ctx context.Context, key string) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	// A key the writer does not know is not stored, acknowledged or not:
	// a received record, new as a rule, is answered without a read of
	// badger (and the wake-ups of its read transaction).
	if !s.cm.w.knows(key) {
		return false, nil
	}
	if err := s.readable(ctx); err != nil {
		return false, err
	}
	err := s.view(func(txn *badger.Txn) error {
		_, err := txn.Get(recKey(key))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", key, err)
	}
	return true, nil
}

// Window selects records by their time (see KeyTime), optionally within one
// group or by one author (not both).
type Window struct {
	Group  string // "" = any group
	Author string // "" = any author; uses the author index
	// AnyGroup must be set to scan every group; it keeps a forgotten Group
	// from silently meaning "everything". Ignored when Author is set.
	AnyGroup bool
	From     int64 // inclusive, ms; 0 = from the beginning
	To       int64 // exclusive, ms; 0 = no upper bound
	Limit    int   // 0 = no limit
	Reverse  bool  // newest first
}

// KeyTime is one index entry.
type KeyTime struct {
	Key string
	// CreatedAt is the record's time in the orders, Unix ms: its createdAt,
	// or its arrival (Meta.StoredAt) if createdAt lies more than
	// Options.MaxClockSkew after that. Get returns the createdAt as signed.
	CreatedAt int64
}

// KeysSince lists the keys of a group whose time is at or after sinceMs,
// oldest first: what a peer asks for on (re)connect.
func (s *Store) KeysSince(ctx context.Context, group string, sinceMs int64, limit int) ([]KeyTime, error) {
	var out []KeyTime
	err := s.Scan(ctx, Window{Group: group, From: sinceMs, Limit: limit}, func(kt KeyTime) error {
		out = append(out, kt)
		return nil
	})
	return out, err
}

// Recent lists the newest keys of a group, newest first.
func (s *Store) Recent(ctx context.Context, group string, limit int) ([]KeyTime, error) {
	var out []KeyTime
	err := s.Scan(ctx, Window{Group: group, Limit: limit, Reverse: true}, func(kt KeyTime) error {
		out = append(out, kt)
		return nil
	})
	return out, err
}

// Bucket summarises the records of one time bucket so two peers can find
// where their holdings differ without exchanging every key.
type Bucket struct {
	Start  int64 // ms, inclusive
	Count  int
	Digest [32]byte // SHA-256 over LP(key) of each key in (time, key) order
}

// Buckets summarises a group's records in [from, to) in buckets of widthMs.
// Empty buckets are omitted. Equal buckets on two peers hold equal key sets.
func (s *Store) Buckets(ctx context.Context, group string, from, to, widthMs int64) ([]Bucket, error) {
	out, _, err := s.BucketsUpTo(ctx, group, from, to, widthMs, 0)
	return out, err
}

// errEnough stops a scan that has what it came for.
var errEnough = errors.New("enough")

// BucketsUpTo is Buckets that returns at most limit buckets (0: no limit)
// and stops reading there, so a caller bounds the work as well as the
// answer; more is true when buckets past the last one returned hold
// records. The last bucket returned is complete.
func (s *Store) BucketsUpTo(ctx context.Context, group string, from, to, widthMs int64, limit int) (_ []Bucket, more bool, _ error) {
	if widthMs <= 0 {
		return nil, false, fmt.Errorf("buckets: width must be positive, got %d", widthMs)
	}
	var out []Bucket
	var cur *Bucket
	h := sha256.New()
	var lp []byte
	flush := func() {
		if cur != nil {
			copy(cur.Digest[:], h.Sum(nil))
			out = append(out, *cur)
			h.Reset()
		}
	}
	err := s.Scan(ctx, Window{Group: group, From: from, To: to}, func(kt KeyTime) error {
		start := kt.CreatedAt - mod(kt.CreatedAt, widthMs)
		if cur == nil || cur.Start != start {
			flush()
			if limit > 0 && len(out) >= limit {
				cur, more = nil, true
				return errEnough
			}
			cur = &Bucket{Start: start}
		}
		cur.Count++
		lp = strconv.AppendInt(lp[:0], int64(len(kt.Key)), 10)
		lp = append(lp, ':')
		lp = append(lp, kt.Key...)
		h.Write(lp)
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, false, err
	}
	flush()
	return out, more, nil
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// Children lists the stored records that name key as a direct parent.
func (s *Store) Children(ctx context.Context, key string) ([]string, error) {
	return s.edges(ctx, pChild, key)
}

// ReferencedBy lists the stored records whose lineage (parents or
// ancestors) names key: the records that keep it from being purged.
func (s *Store) ReferencedBy(ctx context.Context, key string) ([]string, error) {
	return s.edges(ctx, pRefBy, key)
}

func (s *Store) edges(ctx context.Context, p byte, key string) ([]string, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	prefix := edgePrefix(p, key)
	var out []string
	err := s.scan(ctx, badger.IteratorOptions{Prefix: prefix}, func(item *badger.Item) error {
		out = append(out, string(bytes.Clone(item.Key()[len(prefix):])))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing edges of %s: %w", key, err)
	}
	return out, nil
}

// MarkKept sets or clears the Kept flag, which exempts a record from
// age-based purge (spec §6.3 Canon tier).
func (s *Store) MarkKept(ctx context.Context, key string, kept bool) error {
	j := newJob(ctx, 256, func(t *wtx) (func(), error) {
		v, found, err := t.get(recKey(key))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		if len(v) < 2 {
			return nil, fmt.Errorf("%w: record %s too short", ErrCorrupted, key)
		}
		if kept {
			v[1] |= flKept
		} else {
			v[1] &^= flKept
		}
		t.set(recKey(key), v)
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return fmt.Errorf("marking %s kept=%t: %w", key, kept, err)
	}
	return nil
}
