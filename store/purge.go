package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// PurgeResult reports what a purge did.
type PurgeResult struct {
	Expired   int // records past the cutoff
	Deleted   int
	Protected int // expired but kept: marked Kept or referenced by a surviving record's lineage
}

// Purge deletes records older than olderThan (by their time in the orders,
// against the store's clock). See PurgeBefore.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration) (PurgeResult, error) {
	return s.PurgeBefore(ctx, s.opts.Now().Add(-olderThan).UnixMilli())
}

// PurgeBefore deletes records whose time in the orders (KeyTime.CreatedAt:
// createdAt, or the arrival of a record dated more than MaxClockSkew after
// it) is before cutoffMs, except those marked
// Kept and those named in the parents or ancestors of any record that
// survives (spec §6.3 graph integrity). Protection is recomputed on every
// call, so an ancestor becomes purgeable once its last descendant is gone.
func (s *Store) PurgeBefore(ctx context.Context, cutoffMs int64) (PurgeResult, error) {
	var res PurgeResult
	type cand struct {
		rec       Record
		protected bool
	}
	cands := map[string]*cand{}
	err := s.Scan(ctx, Window{AnyGroup: true, To: cutoffMs}, func(kt KeyTime) error {
		rec, err := s.GetLineage(ctx, kt.Key)
		if err != nil {
			return err
		}
		cands[kt.Key] = &cand{rec: rec}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("purge: listing expired records: %w", err)
	}
	res.Expired = len(cands)

	// Seed protection with kept records and those referenced from outside
	// the expired set, then let protection flow down each protected
	// record's lineage.
	var queue []*cand
	for k, c := range cands {
		if c.rec.Meta.Kept {
			c.protected = true
			queue = append(queue, c)
			continue
		}
		refs, err := s.ReferencedBy(ctx, k)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		for _, r := range refs {
			if _, expired := cands[r]; !expired {
				c.protected = true
				queue = append(queue, c)
				break
			}
		}
	}
	for len(queue) > 0 {
		c := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, a := range refTargets(&c.rec.Entry) {
			if ac, ok := cands[a]; ok && !ac.protected {
				ac.protected = true
				queue = append(queue, ac)
			}
		}
	}

	var doomed []Record
	for _, c := range cands {
		if c.protected {
			res.Protected++
		} else {
			doomed = append(doomed, c.rec)
		}
	}
	// Descendants before ancestors: a descendant's lineage is a strict
	// superset of its ancestor's, so longer lineage goes first. Each delete
	// re-checks for surviving referencers, and this order means a record
	// whose delete is skipped still protects everything it names.
	sort.Slice(doomed, func(i, j int) bool {
		a, b := len(doomed[i].Ancestors)+len(doomed[i].Parents), len(doomed[j].Ancestors)+len(doomed[j].Parents)
		if a != b {
			return a > b
		}
		return doomed[i].CreatedAt > doomed[j].CreatedAt
	})
	const chunk = 128
	for start := 0; start < len(doomed); start += chunk {
		part := doomed[start:min(start+chunk, len(doomed))]
		jobs := make([]*job, len(part))
		deleted := make([]bool, len(part))
		for i := range part {
			jobs[i] = s.deleteJob(ctx, part[i].Key, &deleted[i])
		}
		errs, err := s.submit(ctx, jobs)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		for i, e := range errs {
			if e != nil {
				return res, fmt.Errorf("purge: deleting %s: %w", part[i].Key, e)
			}
			if deleted[i] {
				res.Deleted++
			} else {
				res.Protected++
			}
		}
	}
	if res.Deleted > 0 {
		if err := s.compactSegments(ctx); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		// Superseded roster entries are in badger's value log.
		if err := s.compactValueLog(ctx); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
	}
	return res, nil
}

// valueThreshold is the value size from which badger keeps a value in its
// value log instead of the LSM tree: roster entries go there; record
// pointers and index keys do not.
const valueThreshold = 256

// compactValueLog gives back the value-log space of superseded values.
//
// Badger's value-log GC copies a file's live values into the current log and
// then deletes the file, and with SyncWrites off (as here, see Open) nothing
// syncs the copies first: a power loss could lose records that were durable
// in the deleted file. An open iterator defers that deletion until it
// closes, so each round runs under one, makes badger durable, and only then
// lets the old file go.
func (s *Store) compactValueLog(ctx context.Context) error {
	const maxRounds = 16
	for range maxRounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.rlockDB()
		txn := s.db.NewTransaction(false)
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
		gcErr := s.db.RunValueLogGC(0.5)
		if gcErr == nil {
			s.wroteBadger() // it copied live entries
		}
		var syncErr error
		if gcErr == nil {
			syncErr = syncBadger(s.db, s.dir)
		}
		s.dbMu.RUnlock()
		if syncErr != nil {
			// The copies may not be durable, so the old file must stay: the
			// iterator is left open on purpose (until the process ends) and
			// the store refuses further writes.
			s.breakWith(syncErr)
			return fmt.Errorf("compacting value log: %w", syncErr)
		}
		it.Close()
		txn.Discard()
		switch {
		case errors.Is(gcErr, badger.ErrNoRewrite), errors.Is(gcErr, badger.ErrRejected):
			return nil
		case gcErr != nil:
			return fmt.Errorf("compacting value log: %w", gcErr)
		}
	}
	return nil
}

// deleteJob removes one record and its index entries unless, at commit time,
// it is kept or some stored record still references it (a descendant may
// have arrived since the purge looked).
func (s *Store) deleteJob(ctx context.Context, key string, deleted *bool) *job {
	return newJob(ctx, 1024, func(t *wtx) (func(), error) {
		v, found, err := t.get(recKey(key))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, nil
		}
		rec, err := decodeRecord(key, v, false)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupted, err)
		}
		if rec.Meta.Kept {
			return nil, nil
		}
		if t.hasPrefix(edgePrefix(pRefBy, key)) {
			return nil, nil
		}
		t.del(recKey(key))
		t.w.unknow(t.b, key)
		for _, k := range indexKeys(&rec.Entry) {
			t.del(k)
		}
		// Other authors' assertions of it go with it.
		for _, k := range t.keysWithPrefix(edgePrefix(pAssert, key)) {
			t.del(k)
		}
		*deleted = true
		t.count(-1)
		at := s.orderAt(&rec)
		return func() {
			s.order.remove(key, at, rec.Group, rec.CreatedBy)
			s.idx.remove([]string{key}, []docTerms{s.idx.analyze(rec.Texts)})
			s.lines.remove(key)
		}, nil
	})
}

// compactStep names a point in compactSegments that testHooks.compactStep
// sees.
type compactStep int

const (
	// compactListed: the live records of the sealed segments are listed;
	// nothing has moved.
	compactListed compactStep = iota + 1
	// compactMoved: one chunk of a segment's live records is acknowledged
	// in the current segment.
	compactMoved
	// compactApplied: badger points at the moved copies of all of them.
	compactApplied
	// compactRemoved: the segment is removed.
	compactRemoved
)

func (s *Store) compacted(step compactStep, seg uint32) error {
	if f := s.opts.hooks.compactStep; f != nil {
		return f(step, seg)
	}
	return nil
}

// compactSegments gives back the space of deleted records in the log.
// Every sealed segment (one before the replay mark) whose live records
// fill less than half of it has them written again, through the writer
// like any put, into the current segment, and is removed only once badger
// points at the copies. A record changed or deleted meanwhile is left to
// that change.
//
// No crash between these steps loses a record: until the removal the old
// copy is still there, and the new copies' frames lie after the replay
// mark, so Open applies them again should badger have lost their pointers.
// Waiting for badger to hold the pointers before the removal is what keeps
// readers right: a reader that looked a record up just before its move
// finds the segment gone and looks again (Store.get), and that second look
// must find the new pointer, not the old one in a batch still to be
// applied. Check, which reads every record, holds the applies off while it
// runs, so no segment goes from under it.
func (s *Store) compactSegments(ctx context.Context) error {
	// The purge's deletes are acknowledged; what is live is what badger
	// holds once it has them.
	if err := s.waitApplied(ctx); err != nil {
		return err
	}
	_, marked := s.log.current()
	sizes, err := s.log.sealed()
	if err != nil {
		return fmt.Errorf("compacting log: %w", err)
	}
	type ref struct {
		key string
		ptr []byte
	}
	live := map[uint32]int64{}
	refs := map[uint32][]ref{}
	err = s.scan(context.Background(), badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 256, Prefix: []byte{pRec}}, func(item *badger.Item) error {
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		p, err := decodePtr(v)
		if err != nil {
			return fmt.Errorf("%w: record %q: %v", ErrCorrupted, item.Key()[1:], err)
		}
		if _, ok := sizes[p.seg]; ok && p.seg < marked {
			live[p.seg] += int64(p.n)
			refs[p.seg] = append(refs[p.seg], ref{string(item.Key()[1:]), v})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("compacting log: %w", err)
	}
	if err := s.compacted(compactListed, 0); err != nil {
		return fmt.Errorf("compacting log: %w", err)
	}
	for _, seg := range slices.Sorted(maps.Keys(sizes)) {
		if size := sizes[seg]; seg >= marked || 2*live[seg] >= size-segDataStart {
			continue
		}
		const chunk = 128
		rs := refs[seg]
		for start := 0; start < len(rs); start += chunk {
			part := rs[start:min(start+chunk, len(rs))]
			jobs := make([]*job, len(part))
			for i, r := range part {
				jobs[i] = newJob(ctx, 1024, func(t *wtx) (func(), error) {
					if _, changed := t.w.ov[string(recKey(r.key))]; changed {
						return nil, nil // by a batch not yet in badger
					}
					it, err := t.w.view().Get(recKey(r.key))
					if errors.Is(err, badger.ErrKeyNotFound) {
						return nil, nil
					}
					if err != nil {
						return nil, err
					}
					now, err := it.ValueCopy(nil)
					if err != nil {
						return nil, err
					}
					if !bytes.Equal(now, r.ptr) {
						return nil, nil
					}
					v, err := s.readPointer(now)
					if err != nil {
						return nil, fmt.Errorf("moving %s: %w", r.key, err)
					}
					t.set(recKey(r.key), v)
					return nil, nil
				})
			}
			errs, err := s.submit(ctx, jobs)
			if err != nil {
				return fmt.Errorf("compacting log: %w", err)
			}
			for i, e := range errs {
				if e != nil {
					return fmt.Errorf("compacting log: moving %s: %w", part[i].key, e)
				}
			}
			if err := s.compacted(compactMoved, seg); err != nil {
				return fmt.Errorf("compacting log: %w", err)
			}
		}
		if err := s.waitApplied(ctx); err != nil {
			return fmt.Errorf("compacting log: %w", err)
		}
		if err := s.compacted(compactApplied, seg); err != nil {
			return fmt.Errorf("compacting log: %w", err)
		}
		if err := s.log.remove(seg); err != nil {
			return fmt.Errorf("compacting log: %w", err)
		}
		if err := s.compacted(compactRemoved, seg); err != nil {
			return fmt.Errorf("compacting log: %w", err)
		}
	}
	return nil
}
