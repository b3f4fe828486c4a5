package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// A job is one unit of mutation run by the writer goroutine. Jobs queued
// while a commit is in flight are applied together in the next transaction,
// so N concurrent writers share one WAL sync (group commit).
//
// apply must decide on a job-level error before it writes anything: a job
// that fails leaves the shared transaction untouched. The returned after
// runs once the transaction is durable, still under writeMu.
type job struct {
	ctx   context.Context
	size  int
	apply func(txn *badger.Txn) (after func(), err error)
	done  chan error
}

// maxBatchBytes keeps a batch well inside badger's per-transaction limit
// (15% of the memtable size).
const maxBatchBytes = 1 << 20

// maxLinger bounds how long a commit waits for puts still being prepared.
const maxLinger = 200 * time.Microsecond

func (s *Store) writer() {
	defer close(s.wdone)
	batch := make([]*job, 0, s.opts.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case j := <-s.jobs:
			batch = append(batch, j)
		case <-s.closing:
			for {
				select {
				case j := <-s.jobs:
					batch = append(batch, j)
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				s.runBatch(batch)
			}
			return
		}
		size := batch[0].size
		var linger *time.Timer
	fill:
		for len(batch) < s.opts.MaxBatch && size < maxBatchBytes {
			select {
			case j := <-s.jobs:
				batch = append(batch, j)
				size += j.size
				continue
			default:
			}
			// Callers still encoding a put will want this commit too; waiting
			// a moment for them is far cheaper than a sync of their own.
			if s.preparing.Load() == 0 {
				break
			}
			if linger == nil {
				linger = time.NewTimer(maxLinger)
			}
			select {
			case j := <-s.jobs:
				batch = append(batch, j)
				size += j.size
			case <-linger.C:
				break fill
			}
		}
		if linger != nil {
			linger.Stop()
		}
		s.batches.Add(1)
		s.batched.Add(int64(len(batch)))
		s.runBatch(batch)
	}
}

func (s *Store) runBatch(batch []*job) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.runBatchLocked(batch)
}

func (s *Store) runBatchLocked(batch []*job) {
	txn := s.db.NewTransaction(true)
	afters := make([]func(), len(batch))
	errs := make([]error, len(batch))
	for i, j := range batch {
		if err := j.ctx.Err(); err != nil {
			// Nobody waits for it any more; not writing it is the honest outcome.
			errs[i] = err
			continue
		}
		after, err := j.apply(txn)
		if errors.Is(err, badger.ErrTxnTooBig) {
			txn.Discard()
			if len(batch) == 1 {
				j.done <- fmt.Errorf("writing: a single record exceeds the transaction limit: %w", err)
				return
			}
			for _, one := range batch {
				s.runBatchLocked([]*job{one})
			}
			return
		}
		afters[i], errs[i] = after, err
	}
	if err := txn.Commit(); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("committing to store: %w", err)
			}
		}
	} else {
		for _, a := range afters {
			if a != nil {
				a()
			}
		}
	}
	for i, j := range batch {
		j.done <- errs[i]
	}
}

// submit queues jobs and waits until each has been committed or failed,
// returning each job's outcome. A call-level error (closed, cancelled) means
// some outcomes are unknown: those jobs may still commit later.
func (s *Store) submit(ctx context.Context, jobs []*job) ([]error, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	for _, j := range jobs {
		select {
		case s.jobs <- j:
		case <-s.closing:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		select {
		case errs[i] = <-j.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wdone:
			select {
			case errs[i] = <-j.done:
			default:
				return nil, ErrClosed
			}
		}
	}
	return errs, nil
}

func newJob(ctx context.Context, size int, apply func(txn *badger.Txn) (func(), error)) *job {
	return &job{ctx: ctx, size: size, apply: apply, done: make(chan error, 1)}
}

// Item is one record for PutMany.
type Item struct {
	Entry Entry
	Meta  Meta
}

// PutResult is the outcome of one PutMany item.
type PutResult struct {
	Record    Record
	Duplicate bool
	Err       error
}

// Put stores a record and returns once it is durable. Storing a key again
// changes nothing: the stored record comes back with duplicate=true.
func (s *Store) Put(ctx context.Context, e Entry, m Meta) (Record, bool, error) {
	res, err := s.PutMany(ctx, []Item{{Entry: e, Meta: m}})
	if err != nil {
		return Record{}, false, fmt.Errorf("storing %s: %w", e.Key, err)
	}
	if res[0].Err != nil {
		return Record{}, false, res[0].Err
	}
	return res[0].Record, res[0].Duplicate, nil
}

// PutMany stores several records (e.g. a catch-up batch), each independently
// idempotent, and returns once all are durable or failed. The error is
// non-nil only when the call itself failed (closed, cancelled), in which case
// some items may or may not have been stored; per-item failures are in the
// results.
func (s *Store) PutMany(ctx context.Context, items []Item) ([]PutResult, error) {
	s.preparing.Add(1)
	prepared := false
	defer func() {
		if !prepared {
			s.preparing.Add(-1)
		}
	}()
	res := make([]PutResult, len(items))
	jobs := make([]*job, 0, len(items))
	idx := make([]int, 0, len(items))
	for i := range items {
		e, m := items[i].Entry, items[i].Meta
		if err := e.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if m.StoredAt.IsZero() {
			m.StoredAt = s.opts.Now()
		}
		if m.Source == "" {
			m.Source = "local"
		}
		rec := Record{Entry: e, Meta: m}
		// Encoding and tokenising happen here, on the caller's goroutine, so
		// the single writer only copies bytes into the transaction.
		val := encodeRecord(&rec)
		ikeys := indexKeys(&rec.Entry)
		terms := analyze(e.Texts)
		r := &res[i]
		size := len(val) + len(e.Key)
		for _, k := range ikeys {
			size += len(k) + 16
		}
		jobs = append(jobs, newJob(ctx, size, func(txn *badger.Txn) (func(), error) {
			rk := recKey(rec.Key)
			it, err := txn.Get(rk)
			switch {
			case err == nil:
				err = it.Value(func(v []byte) error {
					var derr error
					r.Record, derr = decodeRecord(rec.Key, v, true)
					return derr
				})
				if err != nil {
					return nil, fmt.Errorf("%w: decoding stored %s: %v", ErrCorrupted, rec.Key, err)
				}
				r.Duplicate = true
				return nil, nil
			case !errors.Is(err, badger.ErrKeyNotFound):
				return nil, fmt.Errorf("looking up %s: %w", rec.Key, err)
			}
			if err := txn.Set(rk, val); err != nil {
				return nil, err
			}
			for _, k := range ikeys {
				if err := txn.Set(k, nil); err != nil {
					return nil, err
				}
			}
			r.Record = rec
			return func() {
				s.idx.add(rec.Key, rec.CreatedAt, rec.Group, terms)
				s.count.Add(1)
			}, nil
		}))
		idx = append(idx, i)
	}
	s.preparing.Add(-1)
	prepared = true
	errs, err := s.submit(ctx, jobs)
	if err != nil {
		// Results may still be written by the writer; never hand them out.
		return nil, err
	}
	for n, jerr := range errs {
		if jerr != nil {
			res[idx[n]] = PutResult{Err: jerr}
		}
	}
	return res, nil
}
