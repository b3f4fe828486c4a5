package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	badger "github.com/dgraph-io/badger/v4"
)

// A job is one unit of mutation run by the leader of the group commit.
//
// Writes are committed in groups, each one durable log frame. A caller
// that submits jobs while nobody leads takes the lead: it yields once, so
// that goroutines ready to submit join it, then applies the queued jobs
// to a batch (a job reads through a wtx, which sees badger
// plus the writes of the batch so far, and records its writes), writes
// the batch to the log as one frame, syncs it, acknowledges its jobs, then
// applies it to badger and indexes it, all on its own goroutine: an
// uncontended put wakes no other goroutine. Jobs submitted meanwhile wait
// in the queue and form the next group, which the writer goroutine leads
// (one hand-off per group, not per job), so the number of puts sharing a
// sync adapts to the load without waiting on a timer. Readers wait for the
// apply (waitApplied), so a caller reads its own acknowledged writes and
// nobody reads a write before it is durable. Badger never holds a pointer
// into a frame that is not on disk. The index runs the jobs' after
// functions (tokenising and the text index) in commit order, off the
// lead: on the leading caller's goroutine when idle, else on the indexer
// goroutine; Search, Scan and Check wait until the index has caught up
// with every acknowledged write, so a search still finds what was stored
// before it started.
//
// apply must decide on a job-level error before it writes anything; should
// it fail anyway, its writes are rolled back. The returned after runs once
// the batch is in badger; it may touch only the text index. Changes to the
// record count go through wtx.count, which is applied together with the
// batch.
type job struct {
	ctx   context.Context
	size  int
	apply func(t *wtx) (after func(), err error)
	// put, when set, is applied instead of apply: a PutMany item, whose job
	// and state are one allocation.
	put *putItem
	// err is the job's outcome, set before done is signalled.
	err error
	// done is signalled once the job is committed or failed; submit gives
	// the jobs of one call one channel with room for all of them.
	done chan struct{}
}

// indexWork is what a job leaves to the index, run once its batch is in
// badger (Store.index).
type indexWork interface{ run() }

// afterFunc is an after function returned by a job's apply.
type afterFunc func()

func (f afterFunc) run() { f() }

// maxBatchBytes keeps a batch well inside badger's per-transaction limit
// (15% of the memtable size) and one log frame small.
const maxBatchBytes = 1 << 20

type batch struct {
	seq    uint64
	jobs   []*job
	errs   []error
	afters []indexWork
	ops    []walOp
	// ptrs holds the encoded log pointers of the batch's record sets; the
	// ops' ptr are slices of it.
	ptrs  []byte
	size  int
	count int64 // change to the number of records
	// write: the frame is durable and badger is to take the batch.
	write bool
	// applied: badger took the batch, so the index must too.
	applied bool
	// refused: its frame was not written for want of space (the store
	// goes on); newKeys are the records it would have added, goneKeys
	// those it would have deleted.
	refused  error
	newKeys  []string
	goneKeys []string
}

// ovEntry is the latest write to a key by a batch not yet in badger.
type ovEntry struct {
	seq uint64
	val []byte
	del bool
}

type undo struct {
	key  string
	prev ovEntry
	had  bool
}

// writerState is owned by the leader of the group commit.
type writerState struct {
	s  *Store
	ov map[string]ovEntry
	// known holds the key of every stored record (forgotten ones
	// included), and those of batches not yet durable: the duplicate
	// check of a put reads it, where the text index would make the leader
	// wait while the index runs, and Has answers "no" from it without a
	// read of badger. So it never lacks a stored key: a key leaves it only
	// with the record, and comes back if that batch is refused. The leader
	// reads it without a lock and changes it under knownMu (know, learn, unknow);
	// other goroutines read it under knownMu (knows).
	known   map[string]struct{}
	knownMu sync.RWMutex
	rtxn    *badger.Txn // read view of badger; renewed after each applied batch
	seq     uint64
	undo    []undo
	// tx is the wtx of the job being applied: no job keeps it past apply.
	tx wtx
}

// wtx is what a job sees while it is applied.
type wtx struct {
	w     *writerState
	b     *batch
	delta int64
}

// count records a change to the number of stored records.
func (t *wtx) count(delta int64) { t.delta += delta }

// get returns a copy of key's current value; for a record key, the record
// its pointer leads to.
func (t *wtx) get(key []byte) ([]byte, bool, error) {
	if e, ok := t.w.ov[string(key)]; ok {
		if e.del {
			return nil, false, nil
		}
		return append([]byte(nil), e.val...), true, nil
	}
	it, err := t.w.view().Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := it.ValueCopy(nil)
	if err == nil && key[0] == pRec {
		v, err = t.w.s.readPointer(v)
	}
	return v, err == nil, err
}

// hasPrefix reports whether any live key starts with prefix.
func (t *wtx) hasPrefix(prefix []byte) bool {
	for k, e := range t.w.ov {
		if !e.del && strings.HasPrefix(k, string(prefix)) {
			return true
		}
	}
	it := t.w.view().NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if e, ok := t.w.ov[string(it.Item().Key())]; ok && e.del {
			continue
		}
		return true
	}
	return false
}

// set and del take ownership of key and val.
func (t *wtx) set(key, val []byte) { t.put(walOp{key: key, val: val}) }
func (t *wtx) del(key []byte)      { t.put(walOp{key: key, del: true}) }

func (t *wtx) put(op walOp) {
	// The overlay's key shares op.key's bytes: set and del own the key,
	// which nothing changes once it is handed over (the log and badger
	// only read it), so the string is as immutable as a copy would be.
	k := unsafe.String(unsafe.SliceData(op.key), len(op.key))
	prev, had := t.w.ov[k]
	t.w.undo = append(t.w.undo, undo{key: k, prev: prev, had: had})
	t.w.ov[k] = ovEntry{seq: t.b.seq, val: op.val, del: op.del}
	t.b.ops = append(t.b.ops, op)
	t.b.size += len(op.key) + len(op.val) + 16
}

func (w *writerState) discardView() {
	if w.rtxn != nil {
		w.rtxn.Discard()
		w.rtxn = nil
	}
}

func (w *writerState) view() *badger.Txn {
	if w.rtxn == nil {
		w.rtxn = w.s.db.NewTransaction(false)
	}
	return w.rtxn
}

// add applies one job to cur (a new batch if nil) and returns the batch.
func (w *writerState) add(cur *batch, j *job) *batch {
	if cur == nil {
		w.seq++
		cur = w.s.newBatch(w.seq)
	}
	cur.jobs = append(cur.jobs, j)
	var after indexWork
	err := j.ctx.Err() // nobody waits for it any more: not writing it is the honest outcome
	if err == nil {
		err = w.s.broken()
	}
	if err == nil && w.s.readOnly.Load() {
		w.discardView() // of the read-only badger, which a swap closes
		if !w.s.tryWritable() {
			err = w.s.diskFull(nil, w.s.opts.reserve())
		}
	}
	if err == nil {
		mark := len(cur.ops)
		w.undo = w.undo[:0]
		w.tx = wtx{w: w, b: cur}
		t := &w.tx
		if j.put != nil {
			after, err = j.put.apply(t)
		} else {
			var f func()
			if f, err = j.apply(t); f != nil {
				after = afterFunc(f)
			}
		}
		if err == nil {
			cur.count += t.delta
		} else {
			for i := len(w.undo) - 1; i >= 0; i-- {
				u := w.undo[i]
				if u.had {
					w.ov[u.key] = u.prev
				} else {
					delete(w.ov, u.key)
				}
			}
			cur.ops = cur.ops[:mark]
			after = nil
		}
	}
	cur.errs = append(cur.errs, err)
	cur.afters = append(cur.afters, after)
	return cur
}

// applied forgets the overlay entries of a batch now in badger.
func (w *writerState) applied(b *batch) {
	for _, op := range b.ops {
		if e, ok := w.ov[string(op.key)]; ok && e.seq == b.seq {
			delete(w.ov, string(op.key))
		}
	}
	if w.rtxn != nil {
		w.rtxn.Discard()
		w.rtxn = nil
	}
}

// forget drops from known the records a refused batch would have added,
// and puts back those it would have deleted.
func (w *writerState) forget(b *batch) {
	w.knownMu.Lock()
	defer w.knownMu.Unlock()
	for _, k := range b.newKeys {
		delete(w.known, k)
	}
	for _, k := range b.goneKeys {
		w.known[k] = struct{}{}
	}
}

// know adds key to known; the leader calls it.
func (w *writerState) know(key string) {
	w.knownMu.Lock()
	w.known[key] = struct{}{}
	w.knownMu.Unlock()
}

// learn adds key to known and reports whether it was there already, in
// one map assignment where a lookup and an insert would hash and probe the
// key twice; the leader calls it.
func (w *writerState) learn(key string) (had bool) {
	w.knownMu.Lock()
	n := len(w.known)
	w.known[key] = struct{}{}
	had = len(w.known) == n
	w.knownMu.Unlock()
	return had
}

// unknow drops key, whose record b deletes, from known; the leader calls it.
func (w *writerState) unknow(b *batch, key string) {
	w.knownMu.Lock()
	delete(w.known, key)
	w.knownMu.Unlock()
	b.goneKeys = append(b.goneKeys, key)
}

// knows reports whether key may be stored: false means it is not.
func (w *writerState) knows(key string) bool {
	w.knownMu.RLock()
	_, ok := w.known[key]
	w.knownMu.RUnlock()
	return ok
}

// commitState is the group commit: the queue of submitted jobs and who
// leads. The leader alone touches the writer's state (w), the log and
// badger's writes; taking the lead under mu orders one leader's writes
// before the next one's.
type commitState struct {
	mu    sync.Mutex
	queue []*job
	// leading: a goroutine holds the lead. Only the holder clears it or
	// hands it to the writer goroutine (wake).
	leading bool
	// closed: Close was called; no job is queued any more.
	closed bool
	// wake hands the lead to the writer goroutine.
	wake chan struct{}
	// checkpointDue: the writer goroutine, taking the lead, checkpoints
	// before anything else.
	checkpointDue bool
	// Owned by the leader.
	w       *writerState
	group   []*job
	payload []byte
}

// indexState is the queue of batches badger took and the text index has
// not: one runner at a time takes them in order.
type indexState struct {
	mu    sync.Mutex
	queue []*batch
	busy  bool      // a goroutine runs the queue
	cond  sync.Cond // signalled as the queue shrinks and when busy ends
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// startWriter starts the writer and indexer goroutines of an opened store.
func (s *Store) startWriter() {
	s.cm.w = &writerState{s: s, ov: map[string]ovEntry{}, known: s.loadedKeys}
	s.loadedKeys = nil
	s.cm.wake = make(chan struct{}, 1)
	s.ix.cond.L = &s.ix.mu
	s.ix.wake = make(chan struct{}, 1)
	s.ix.stop = make(chan struct{})
	s.ix.done = make(chan struct{})
	s.ix.busy = true // the indexer starts with the records found at Open
	go s.indexer()
	go s.writer()
}

// writer is the goroutine that leads when no caller does: the groups
// queued while a caller led (who commits only its own group) and a
// checkpoint a caller's commit made due. While read-only, it looks for
// space to write again now and then, not only when a write comes. At
// Close it commits what is queued and waits for the index.
func (s *Store) writer() {
	defer close(s.wdone)
	c := &s.cm
	var roRetry <-chan time.Time
	if s.readOnly.Load() {
		tick := time.NewTicker(readOnlyRetry)
		defer tick.Stop()
		roRetry = tick.C
	}
	for {
		select {
		case <-c.wake:
			s.lead(true)
		case <-roRetry:
			c.mu.Lock()
			if c.leading {
				c.mu.Unlock()
				continue // the leader tries at its next job
			}
			c.leading = true
			c.mu.Unlock()
			c.w.discardView()
			if s.tryWritable() {
				roRetry = nil
			}
			c.mu.Lock()
			s.release()
		case <-s.closing:
			// Close set closed first: no job is queued any more, and a
			// caller leading now hands the lead here when it is done.
			c.mu.Lock()
			leading := c.leading
			c.leading = true
			c.mu.Unlock()
			if leading {
				<-c.wake
			}
			s.lead(true)
			c.w.discardView()
			s.indexIdle()
			close(s.ix.stop)
			<-s.ix.done
			return
		}
	}
}

// release gives up the lead; it is called with c.mu held and unlocks it.
func (s *Store) release() {
	s.cm.leading = false
	s.cm.mu.Unlock()
}

// lead commits queued jobs, one group per durable frame, while this
// goroutine holds the lead. A caller (bg false) commits one group — its
// own, with whatever was queued beside it — and hands the lead to the
// writer goroutine if more is queued or a checkpoint is due, so no caller
// waits for other callers' groups or for badger's sync; the writer
// goroutine goes on until the queue is empty. Uncontended, a put is
// written, synced and applied on its caller's goroutine with no hand-off;
// contended, the jobs that arrive while one group syncs share the next
// frame, so the number of puts per sync adapts to the load. A caller
// that led then indexes its batch itself if the index is idle.
func (s *Store) lead(bg bool) {
	c := &s.cm
	for {
		if c.checkpointDue {
			c.checkpointDue = false
			s.checkpointNow()
		}
		c.mu.Lock()
		c.group = c.take(c.group[:0], s.opts.MaxBatch)
		c.mu.Unlock()
		var b *batch
		for _, j := range c.group {
			b = c.w.add(b, j)
		}
		clear(c.group)
		due := false
		if b != nil {
			// b is the index's once commit returns (it may be recycled).
			wrote := s.commit(b, bg)
			due = wrote && s.log.since >= s.opts.hooks.checkpointBytes() && s.roomForCheckpoint()
		}
		c.mu.Lock()
		more := len(c.queue) > 0
		if bg && (due || more) {
			c.checkpointDue = due
			c.mu.Unlock()
			continue
		}
		// Once the store closes, the writer goroutine ends the work.
		if !bg && (due || more || c.closed) {
			c.checkpointDue = due
			c.mu.Unlock()
			c.wake <- struct{}{} // the lead passes to the writer goroutine
			break
		}
		s.release()
		break
	}
	if !bg {
		s.indexOnce()
	}
}

// take moves the next group from the queue into group: up to max jobs
// and about maxBatchBytes, at least one if any is queued.
func (c *commitState) take(group []*job, max int) []*job {
	n, size := 0, 0
	for n < len(c.queue) && n < max && size < maxBatchBytes {
		size += c.queue[n].size
		n++
	}
	group = append(group, c.queue[:n]...)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	return group
}

// commit makes b durable as one log frame, acknowledges its jobs, applies
// it to badger and queues it for the index, and reports whether the frame
// was written. The jobs' callers are told before the apply: they read
// through waitApplied, which waits for it. Once queued, b is the index's:
// the caller must not read it after commit returns.
func (s *Store) commit(b *batch, bg bool) bool {
	c := &s.cm
	var err error
	if len(b.ops) > 0 {
		// Records stay where this frame puts them; badger gets pointers,
		// encoded into one buffer sized first so that none moves.
		sets := 0
		for i := range b.ops {
			if b.ops[i].isRecordSet() {
				sets++
			}
		}
		if need := sets * maxPtrLen; cap(b.ptrs) < need {
			b.ptrs = make([]byte, 0, need)
		}
		ptrs := b.ptrs[:0]
		payload := c.payload[:0]
		seg, at := s.log.seg, s.log.payloadOff()
		for i := range b.ops {
			op := &b.ops[i]
			if !op.isRecordSet() {
				payload = appendOp(payload, *op)
				continue
			}
			var pos int
			payload, pos = appendSet(payload, *op)
			n := len(ptrs)
			ptrs = ptrTo(seg, at+int64(pos), op.val).appendTo(ptrs)
			op.ptr = ptrs[n:len(ptrs):len(ptrs)]
		}
		b.ptrs = ptrs
		c.payload = payload
		err = s.broken()
		if err == nil {
			err = s.log.append(payload)
		}
		if err == nil {
			err = s.log.sync()
		}
		if err != nil && (errors.Is(err, errNoRoom) || noSpace(err)) {
			// Out of space: the frame was not written, or its write
			// failed where nothing acknowledged lies (frames are only
			// ever written after the end of the last durable one, and
			// off stays there), so the next frame is written in its
			// place. The store refuses this batch and goes on.
			var cause error
			need := s.opts.reserve()
			if nr := (*noRoomError)(nil); errors.As(err, &nr) {
				need = nr.need
			} else {
				cause = err
			}
			err = s.diskFull(cause, need)
			b.refused = err
		} else if err != nil {
			s.breakWith(err)
		} else if s.full.Load() != nil {
			s.full.Store(nil)
			if s.opts.Logger != nil {
				s.opts.Logger.Info("the store writes again: disk space is back", "path", s.dir)
			}
		}
		if err != nil {
			for i := range b.errs {
				if b.errs[i] == nil {
					b.errs[i] = fmt.Errorf("committing to store: %w", err)
				}
			}
		}
	}
	b.write = err == nil && len(b.ops) > 0
	wrote := b.write
	// Durable: acknowledge now.
	s.ackedSeq.Store(b.seq)
	s.batches.Add(1)
	s.batched.Add(int64(len(b.jobs)))
	for i, j := range b.jobs {
		j.err = b.errs[i]
		j.done <- struct{}{}
	}
	if err := s.applyLocked(b); err != nil {
		// The batch is durable in the log, which restores it at Open.
		s.breakWith(err)
	}
	if b.refused != nil {
		c.w.forget(b)
	}
	c.w.applied(b)
	s.queueIndex(b, bg)
	return wrote
}

// checkpointNow runs a due checkpoint on the leader.
func (s *Store) checkpointNow() {
	if err := s.checkpoint(); noSpace(err) {
		// Badger is not made durable, or no new segment is started: the
		// frames since the mark stay to be applied again, as after a
		// crash. Tried again at the next commit.
		s.diskFull(err, s.opts.reserve())
	} else if err != nil {
		s.breakWith(err)
	}
}

// indexQueue is how many batches badger took may wait for the index before
// the leader waits for it. It must cover the commits made during a merge
// of the text index's delta, or every merge stalls a commit; a search may
// in turn wait for that many batches to be indexed.
const indexQueue = 32

// queueIndex queues b, which badger took, for the index, in commit order
// (the leader calls it). The writer goroutine has the indexer run it if
// idle; a caller that led runs it itself (indexOnce).
func (s *Store) queueIndex(b *batch, bg bool) {
	ix := &s.ix
	ix.mu.Lock()
	for len(ix.queue) >= indexQueue {
		if !ix.busy {
			ix.busy = true
			ix.wake <- struct{}{}
		}
		ix.cond.Wait()
	}
	ix.queue = append(ix.queue, b)
	if bg && !ix.busy {
		ix.busy = true
		ix.wake <- struct{}{}
	}
	ix.mu.Unlock()
}

// indexOnce indexes the next queued batch on the calling goroutine if no
// other runs the index, and leaves the rest to the indexer goroutine: a
// put that led its own commit is indexed with no hand-off.
func (s *Store) indexOnce() {
	ix := &s.ix
	ix.mu.Lock()
	if ix.busy || len(ix.queue) == 0 {
		ix.mu.Unlock()
		return
	}
	ix.busy = true
	b := ix.pop()
	ix.mu.Unlock()
	s.index(b, false)
	ix.mu.Lock()
	if len(ix.queue) > 0 {
		ix.wake <- struct{}{} // busy passes to the indexer goroutine
	} else {
		ix.busy = false
		ix.cond.Broadcast()
	}
	ix.mu.Unlock()
}

// pop takes the first queued batch; called with mu held.
func (ix *indexState) pop() *batch {
	b := ix.queue[0]
	n := copy(ix.queue, ix.queue[1:])
	ix.queue[n] = nil
	ix.queue = ix.queue[:n]
	ix.cond.Broadcast()
	return b
}

// indexer is the goroutine that runs the index when no caller does: first
// the records found at Open (every later batch's index work, adds and
// removals by forget, purge or quarantine, comes after), then whatever it
// is woken for, until the queue is empty.
func (s *Store) indexer() {
	ix := &s.ix
	defer close(ix.done)
	for _, t := range s.loadedTexts {
		s.idx.addTexts(t.key, t.at, t.group, t.texts)
	}
	s.loadedTexts = nil
	close(s.textsLoaded)
	for {
		ix.mu.Lock()
		if len(ix.queue) == 0 {
			ix.busy = false
			ix.cond.Broadcast()
			ix.mu.Unlock()
			select {
			case <-ix.wake:
				continue
			case <-ix.stop:
				return
			}
		}
		b := ix.pop()
		ix.mu.Unlock()
		s.index(b, true)
	}
}

// indexIdle waits until every queued batch is indexed.
func (s *Store) indexIdle() {
	ix := &s.ix
	ix.mu.Lock()
	for ix.busy || len(ix.queue) > 0 {
		if !ix.busy {
			ix.busy = true
			ix.wake <- struct{}{}
		}
		ix.cond.Wait()
	}
	ix.mu.Unlock()
}

// index runs the after functions of a batch badger has taken and reports
// it done to Search, Scan and Check (s.indexed).
func (s *Store) index(b *batch, yield bool) {
	if b.applied {
		for _, a := range b.afters {
			if a != nil {
				a.run()
				if yield {
					// Index work can wait; writers woken by this
					// batch's acknowledgement cannot. Yielding after
					// each record lets them prepare the next batch
					// first.
					runtime.Gosched()
				}
			}
		}
	}
	s.indexed.advance(b.seq)
	s.freeBatch(b)
}

// maxRecycledOps bounds the batches kept for reuse: a big catch-up batch's
// slices are left to the collector.
const maxRecycledOps = 256

// newBatch returns an empty batch numbered seq, reusing one the index is
// done with if there is one.
func (s *Store) newBatch(seq uint64) *batch {
	b, _ := s.batchPool.Get().(*batch)
	if b == nil {
		b = &batch{}
	}
	b.seq = seq
	return b
}

// freeBatch empties b, which the index is done with, for newBatch: nothing
// holds a batch once it is indexed (the leader, badger's apply and the
// index queue are done with it), and the jobs, records and pointers it
// referred to are released.
func (s *Store) freeBatch(b *batch) {
	if cap(b.ops) > maxRecycledOps || cap(b.jobs) > maxRecycledOps {
		return
	}
	clear(b.jobs)
	clear(b.errs)
	clear(b.afters)
	clear(b.ops)
	clear(b.newKeys)
	clear(b.goneKeys)
	*b = batch{
		jobs: b.jobs[:0], errs: b.errs[:0], afters: b.afters[:0], ops: b.ops[:0],
		ptrs: b.ptrs[:0], newKeys: b.newKeys[:0], goneKeys: b.goneKeys[:0],
	}
	s.batchPool.Put(b)
}

// applyLocked writes a batch that is durable in the log into badger (if
// b.write) and publishes its record count.
func (s *Store) applyLocked(b *batch) error {
	write := b.write
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var err error
	if write && !s.opts.hooks.lostBadgerWrites {
		err = applyOps(s.db, b.ops)
		s.wroteBadger()
	}
	if write && err == nil {
		b.applied = true
		s.count.Add(b.count)
	}
	// Should badger fail, the store refuses further writes, and the log
	// restores what it had at Open. Every batch gets a sequence number
	// readers, Search and Check wait for, applied or not.
	s.appliedSeq.Store(b.seq)
	s.applied.advance(b.seq)
	return err
}

// scan runs fn on each item o selects, in key order, in one read
// transaction; ctx ending or fn's error stops it.
func (s *Store) scan(ctx context.Context, o badger.IteratorOptions, fn func(*badger.Item) error) error {
	return s.view(func(txn *badger.Txn) error { return scanTxn(ctx, txn, o, fn) })
}

// scanTxn is scan within txn, for reads that must see one snapshot.
func scanTxn(ctx context.Context, txn *badger.Txn, o badger.IteratorOptions, fn func(*badger.Item) error) error {
	it := txn.NewIterator(o)
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(it.Item()); err != nil {
			return err
		}
	}
	return nil
}

// readable is what a read of badger checks first: the store is open, and
// every write acknowledged before the read is applied (waitApplied).
func (s *Store) readable(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.waitApplied(ctx)
}

// waitApplied returns once badger holds every batch acknowledged before
// the call: a write's callers are told it is durable before it is applied.
func (s *Store) waitApplied(ctx context.Context) error {
	acked := s.ackedSeq.Load()
	if s.appliedSeq.Load() >= acked {
		return nil
	}
	return s.applied.wait(ctx, acked)
}

// waitIndexed returns once the indexes hold every batch acknowledged
// before the call.
func (s *Store) waitIndexed(ctx context.Context) error {
	if err := s.waitTextsLoaded(ctx); err != nil {
		return err
	}
	return s.indexed.wait(ctx, s.ackedSeq.Load())
}

// TextsLoaded is closed once the text index holds the records found at
// Open: the end of the start-up's allocation-heavy work.
func (s *Store) TextsLoaded() <-chan struct{} { return s.textsLoaded }

// waitTextsLoaded returns once the text index holds the records found
// at Open.
func (s *Store) waitTextsLoaded(ctx context.Context) error {
	select {
	case <-s.textsLoaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyOps writes ops to badger in order, splitting transactions that grow
// too big (the log frame, not the transaction, is the unit of atomicity).
func applyOps(db *badger.DB, ops []walOp) error {
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	// The sets' entries, in one allocation: a transaction keeps each
	// entry until it is committed, so each is set once and never reused.
	entries := make([]badger.Entry, len(ops))
	for i, op := range ops {
		var err error
		for try := 0; try < 2; try++ {
			switch {
			case op.del:
				err = txn.Delete(op.key)
			case op.ptr != nil:
				entries[i] = badger.Entry{Key: op.key, Value: op.ptr}
				err = txn.SetEntry(&entries[i])
			default:
				entries[i] = badger.Entry{Key: op.key, Value: op.val}
				err = txn.SetEntry(&entries[i])
			}
			if !errors.Is(err, badger.ErrTxnTooBig) {
				break
			}
			if err = txn.Commit(); err != nil {
				return fmt.Errorf("writing to badger: %w", err)
			}
			txn = db.NewTransaction(true)
		}
		if err != nil {
			return fmt.Errorf("writing to badger: %w", err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("writing to badger: %w", err)
	}
	return nil
}

// checkpoint makes everything badger holds durable and starts a new log
// segment, from which frames will be applied again after a crash.
func (s *Store) checkpoint() error {
	if f := s.opts.hooks.checkpointing; f != nil {
		f()
	}
	if err := syncBadger(s.db, s.dir); err != nil {
		return err
	}
	if err := s.log.rotate(); err != nil {
		return err
	}
	return s.mark()
}

var markKey = []byte{pMeta, 'l'}

// mark stores, durably, that frames before the current end of the log are
// in badger: replay starts there.
func (s *Store) mark() error {
	seg, off := s.log.seg, s.log.off
	v := binary.LittleEndian.AppendUint32(nil, seg)
	v = binary.LittleEndian.AppendUint64(v, uint64(off))
	err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(markKey, v) })
	s.wroteBadger()
	if err == nil {
		err = s.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("storing the log's replay mark: %w", err)
	}
	s.log.mu.Lock()
	s.log.marked = seg
	s.log.mu.Unlock()
	return nil
}

// readMark returns the replay mark; ok is false in a store without one.
func (s *Store) readMark() (seg uint32, off int64, ok bool, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(markKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		if err != nil {
			return err
		}
		if len(v) != 12 {
			return fmt.Errorf("%w: log replay mark has %d bytes", ErrCorrupted, len(v))
		}
		seg, off, ok = binary.LittleEndian.Uint32(v), int64(binary.LittleEndian.Uint64(v[4:])), true
		return nil
	})
	if err != nil {
		err = fmt.Errorf("reading the log's replay mark: %w", err)
	}
	return seg, off, ok, err
}

// readPointer returns the record a badger value points to.
func (s *Store) readPointer(v []byte) ([]byte, error) {
	p, err := decodePtr(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupted, err)
	}
	return s.log.read(p)
}

// syncBadger makes every write badger has accepted durable: its active
// memtable log and value log through db.Sync, and the logs of memtables
// rotated but not yet flushed to tables (which db.Sync leaves alone) by
// fsyncing every log file in the directory. Tables and the manifest are
// synced by badger itself when written.
func syncBadger(db *badger.DB, dir string) error {
	if err := db.Sync(); err != nil {
		return fmt.Errorf("syncing badger: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("syncing badger: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".mem") && !strings.HasSuffix(name, ".vlog") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // flushed and removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("syncing badger: %w", err)
		}
		err = fdatasync(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("syncing badger %s: %w", name, err)
		}
	}
	return syncDir(dir)
}

func (s *Store) broken() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// breakWith stops all further writes: after a failed log write or sync the
// state of the file is unknown, and retrying could acknowledge lost data.
func (s *Store) breakWith(err error) {
	err = fmt.Errorf("store refuses writes after an earlier failure: %w", err)
	s.failed.CompareAndSwap(nil, &err)
}

// submitOne submits one job and returns its error, or the submission's.
func (s *Store) submitOne(ctx context.Context, j *job) error {
	var one [1]*job
	one[0] = j
	if err := s.submitJobs(ctx, one[:]); err != nil {
		return err
	}
	return j.err
}

// submit queues jobs and waits until each has been committed or failed,
// returning each job's outcome. A call-level error (closed, cancelled) means
// some outcomes are unknown: those jobs may still commit later.
func (s *Store) submit(ctx context.Context, jobs []*job) ([]error, error) {
	if err := s.submitJobs(ctx, jobs); err != nil {
		return nil, err
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		errs[i] = j.err
	}
	return errs, nil
}

// submitJobs is submit leaving each outcome in its job's err. A caller
// that finds nobody leading commits the queue itself (lead).
func (s *Store) submitJobs(ctx context.Context, jobs []*job) error {
	// One channel for the call, with room for every job's signal, so the
	// leader never blocks on it; a single job's is reused once it has
	// been signalled, which happens exactly once.
	var done chan struct{}
	if len(jobs) == 1 {
		done, _ = s.donePool.Get().(chan struct{})
	}
	if done == nil {
		done = make(chan struct{}, len(jobs))
	}
	for _, j := range jobs {
		j.done = done
	}
	c := &s.cm
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.queue = append(c.queue, jobs...)
	lead := !c.leading
	c.leading = true
	c.mu.Unlock()
	if lead {
		// Let goroutines that are ready to run reach their submit first,
		// so that they share this group's frame and sync (queued behind
		// the lead this caller holds) instead of each leading a group of
		// its own: a commit's direct write costs tens of µs of CPU
		// whatever it holds, and a caller blocked in it does not give up
		// its P at once, so under load on few cores the others would
		// otherwise keep finding nobody leading. With nothing else ready
		// to run, the yield returns at once.
		runtime.Gosched()
		s.lead(false)
	}
	for range jobs {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(jobs) == 1 {
		s.donePool.Put(done)
	}
	return nil
}

func newJob(ctx context.Context, size int, apply func(t *wtx) (func(), error)) *job {
	return &job{ctx: ctx, size: size, apply: apply}
}

// Item is one record for PutMany.
type Item struct {
	Entry Entry
	Meta  Meta
	// Annexes are written in the record's commit when it is new (annex.go).
	// PutMany takes ownership of their values: they are written as they
	// are, not copied, so the caller never changes them once passed.
	Annexes []ItemAnnex
}

// PutResult is the outcome of one PutMany item.
type PutResult struct {
	Record    Record
	Duplicate bool
	// Forgotten: the key was forgotten here (a duplicate that stored
	// nothing; Record is the hidden record kept for lineage, or empty).
	Forgotten bool
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
	// Every item's job and state are one allocation, a single item's with
	// its result; its job list stays on the stack.
	var res []PutResult
	var puts []putItem
	var one [1]*job
	jobs := one[:0]
	if len(items) == 1 {
		single := new(struct {
			res [1]PutResult
			put [1]putItem
		})
		res, puts = single.res[:], single.put[:]
	} else {
		res, puts = make([]PutResult, len(items)), make([]putItem, len(items))
		jobs = make([]*job, 0, len(items))
	}
	for i := range items {
		e, m, annexes := items[i].Entry, items[i].Meta, items[i].Annexes
		if err := e.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if err := checkItemAnnexes(e.Key, annexes); err != nil {
			res[i].Err = err
			continue
		}
		if m.StoredAt.IsZero() {
			m.StoredAt = s.opts.Now()
		}
		m.Source = cmp.Or(m.Source, "local")
		p := &puts[i]
		p.s, p.r, p.annexes = s, &res[i], annexes
		p.rec = Record{Entry: e, Meta: m}
		p.at = s.orderAt(&p.rec)
		// Encoding happens here, on the caller's goroutine, so the single
		// writer only copies bytes into the transaction; tokenising happens
		// on the indexer.
		p.val = encodeRecord(&p.rec)
		p.ikeys = indexKeys(&p.rec.Entry)
		size := len(p.val) + len(e.Key)
		for _, k := range p.ikeys {
			size += len(k) + 16
		}
		p.job = job{ctx: ctx, size: size, put: p}
		jobs = append(jobs, &p.job)
	}
	if err := s.submitJobs(ctx, jobs); err != nil {
		// Results may still be written by the writer; never hand them out.
		return nil, err
	}
	for _, j := range jobs {
		if j.err != nil {
			*j.put.r = PutResult{Err: j.err}
		}
	}
	return res, nil
}

// putItem is one PutMany item as its job applies it and the index then
// takes it (run).
type putItem struct {
	job
	s       *Store
	r       *PutResult
	rec     Record
	at      int64
	val     []byte
	ikeys   [][]byte
	annexes []ItemAnnex
}

// apply is the item's job: it stores the record unless the key is held or
// forgotten, and returns the item as the index's work if the record is to
// be surfaced.
func (p *putItem) apply(t *wtx) (indexWork, error) {
	rec, r := &p.rec, p.r
	rk := recKey(rec.Key)
	// A key the writer does not know is new without a lookup.
	var v []byte
	found, err := false, error(nil)
	// Learnt now: nothing below fails once the key was not known, and a
	// known key stays known whatever the put finds.
	known := t.w.learn(rec.Key)
	if known {
		v, found, err = t.get(rk)
	}
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", rec.Key, err)
	}
	if found {
		r.Record, err = decodeRecord(rec.Key, v, true)
		if err != nil {
			return nil, fmt.Errorf("%w: decoding stored %s: %v", ErrCorrupted, rec.Key, err)
		}
		r.Duplicate, r.Forgotten = true, r.Record.Meta.Forgotten
		return nil, nil
	}
	if known {
		// A forgotten key stays known: its tombstone makes the
		// put a duplicate that stores nothing (forget.go).
		_, tomb, err := t.get(tombKey(rec.Key))
		if err != nil {
			return nil, fmt.Errorf("looking up %s: %w", rec.Key, err)
		}
		if tomb {
			r.Duplicate, r.Forgotten = true, true
			return nil, nil
		}
	}
	t.set(rk, p.val)
	for _, k := range p.ikeys {
		t.set(k, nil)
	}
	setAnnexes(t, rec.Key, p.annexes)
	t.b.newKeys = append(t.b.newKeys, rec.Key)
	r.Record = *rec
	t.count(1)
	if rec.Meta.Quarantined {
		// Kept, never surfaced: no order or text index holds it.
		s := p.s
		s.trust.mu.Lock()
		s.trust.quarantine(rec.Key)
		s.trust.mu.Unlock()
		return nil, nil
	}
	return p, nil
}

// run adds a stored record to the order, text and lineage indexes.
func (p *putItem) run() {
	s, rec := p.s, &p.rec
	s.order.add(rec.Key, p.at, rec.Group, rec.CreatedBy)
	s.idx.addTexts(rec.Key, p.at, rec.Group, rec.Texts)
	s.lines.add(rec.Key, p.at, rec.Parents)
}
