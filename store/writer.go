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
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// A job is one unit of mutation run by the writer goroutine.
//
// The write path is a two-stage pipeline. The writer goroutine applies jobs
// to the batch being built: a job reads through a wtx, which sees badger
// plus every write of batches not yet in badger, and records its writes.
// The syncer goroutine takes one finished batch at a time, writes it to
// the log as one durable frame, acknowledges its jobs, and only then
// applies it to badger: while the next batch's frame is written, or at
// once when a reader asks, or after applyIdle with nothing to write.
// Readers wait for that apply (waitApplied), so a caller reads its own
// acknowledged writes and nobody reads a write before it is durable.
// Badger never holds a pointer into a frame that is not on disk. The
// indexer goroutine then runs the jobs' after functions (tokenising and
// the text index), off the path writers wait on; Search, Scan and Check
// wait until the index has caught up with every acknowledged write, so a
// search still finds what was stored before it started. While one batch
// syncs the writer fills the next with whatever arrives meanwhile, so the
// number of puts sharing a sync adapts to the load without waiting on a
// timer, and a batch's sync overlaps the work of preparing the next.
//
// apply must decide on a job-level error before it writes anything; should
// it fail anyway, its writes are rolled back. The returned after runs on the
// indexer goroutine once the batch is in badger; it may touch only the text
// index. Changes to the record count go through wtx.count, which the syncer
// applies together with the batch.
type job struct {
	ctx   context.Context
	size  int
	apply func(t *wtx) (after func(), err error)
	done  chan error
}

// maxBatchBytes keeps a batch well inside badger's per-transaction limit
// (15% of the memtable size) and one log frame small.
const maxBatchBytes = 1 << 20

// maxLinger bounds how long an idle syncer waits for writers just
// acknowledged to send their next job.
const maxLinger = 200 * time.Microsecond

type batch struct {
	seq    uint64
	jobs   []*job
	errs   []error
	afters []func()
	ops    []walOp
	size   int
	count  int64 // change to the number of records
	// write: the frame is durable and badger is to take the batch.
	write bool
	// applied: badger took the batch, so the index must too.
	applied bool
	// refused: its frame was not written for want of space (the store
	// goes on); newKeys are the records it would have added.
	refused error
	newKeys []string
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

// writerState is owned by the writer goroutine.
type writerState struct {
	s  *Store
	ov map[string]ovEntry
	// known holds the key of every stored record, including those of
	// batches not yet durable: the duplicate check of a put reads it
	// without a lock, where the text index would make the writer wait
	// while the indexer holds it.
	known map[string]struct{}
	rtxn  *badger.Txn // read view of badger; renewed after each applied batch
	// unapplied are acknowledged batches badger has not taken yet.
	unapplied []*batch
	seq       uint64
	undo      []undo
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
	k := string(op.key)
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
		cur = &batch{seq: w.seq}
	}
	cur.jobs = append(cur.jobs, j)
	var after func()
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
		t := &wtx{w: w, b: cur}
		after, err = j.apply(t)
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

// retire keeps the overlay entries of an acknowledged batch until badger
// has it (beside the next frame write), and forgets those of batches it
// now has.
func (w *writerState) retire(b *batch) {
	w.unapplied = append(w.unapplied, b)
	done := w.s.appliedSeq.Load()
	n := 0
	for _, u := range w.unapplied {
		if u.seq <= done {
			w.applied(u)
		} else {
			w.unapplied[n] = u
			n++
		}
	}
	clear(w.unapplied[n:])
	w.unapplied = w.unapplied[:n]
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

// forget drops from known the records a refused batch would have added.
func (w *writerState) forget(b *batch) {
	for _, k := range b.newKeys {
		delete(w.known, k)
	}
}

// refuse fails every job of cur, the batch built while a refused one was
// being written: its jobs read that batch's writes (a put of the same
// record found it "already stored"), so acknowledging them could
// acknowledge what is not on disk. Its writes leave the overlay, and it
// goes to the syncer with nothing to write.
func (w *writerState) refuse(cur *batch, cause error) {
	for i := range cur.errs {
		if cur.errs[i] == nil {
			cur.errs[i] = fmt.Errorf("committing to store: %w", cause)
		}
		cur.afters[i] = nil
	}
	for _, op := range cur.ops {
		if e, ok := w.ov[string(op.key)]; ok && e.seq == cur.seq {
			// A write of an older batch to the same key, not yet in
			// badger, is hidden until that batch is applied (a read of
			// the roster may see badger's older entry meanwhile).
			delete(w.ov, string(op.key))
		}
	}
	w.forget(cur)
	// Jobs added to cur from here on did not see the refused batch: they
	// are written (or refused) on their own.
	cur.ops, cur.count, cur.size, cur.newKeys = nil, 0, 0, nil
}

func (s *Store) writer() {
	defer close(s.wdone)
	w := &writerState{s: s, ov: map[string]ovEntry{}, known: s.loadedKeys}
	s.loadedKeys = nil
	defer func() {
		if w.rtxn != nil {
			w.rtxn.Discard()
		}
	}()
	toSync := make(chan *batch, 1)
	synced := make(chan *batch, 1)
	syncerDone := make(chan struct{})
	go s.syncer(toSync, synced, syncerDone)
	defer func() {
		close(toSync)
		<-syncerDone
	}()
	var cur *batch
	inflight := false
	closing := s.closing
	// expect counts jobs acknowledged since the syncer last took a batch
	// whose callers have not sent a new job yet. Synchronous writers come
	// back soon after their acknowledgement; handing the syncer a batch
	// without them would split them into two groups that alternate between
	// batches, each paying for a durable write of its own. So an idle
	// syncer waits for them, at most maxLinger, and not at all once they
	// are in.
	//
	// The syncer acknowledges a batch before this goroutine hears of it on
	// synced (and may checkpoint in between); callers already back by then
	// are early, not expected. ackMark is the value s.batched (counted
	// before acknowledging) reaches once the batch in flight is
	// acknowledged.
	expect, early := 0, 0
	var ackMark int64
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var lingerC <-chan time.Time
	// While read-only, the store looks for space to write again now and
	// then, not only when a write comes.
	var roRetry <-chan time.Time
	if s.readOnly.Load() {
		tick := time.NewTicker(readOnlyRetry)
		defer tick.Stop()
		roRetry = tick.C
	}
	onSynced := func(b *batch) {
		inflight = false
		if b.refused != nil {
			w.forget(b)
			if cur != nil {
				w.refuse(cur, b.refused)
			}
		}
		w.retire(b)
		expect = max(expect+len(b.jobs)-early, 0)
		early = 0
	}
	// hearSynced takes the end of the batch in flight, if it came while
	// there was nothing to send, before a job is added.
	hearSynced := func() {
		if cur == nil && inflight {
			select {
			case b := <-synced:
				onSynced(b)
			default:
			}
		}
	}
	for {
		full := cur != nil && (len(cur.jobs) >= s.opts.MaxBatch || cur.size >= maxBatchBytes)
		if cur != nil && !inflight {
			if expect > 0 && !full && closing != nil {
				if lingerC == nil {
					linger.Reset(maxLinger)
					lingerC = linger.C
				}
			} else {
				if lingerC != nil {
					linger.Stop()
					lingerC = nil
				}
				ackMark = s.batched.Load() + int64(len(cur.jobs))
				toSync <- cur
				cur, inflight, expect = nil, true, 0
				continue
			}
		}
		if closing == nil && cur == nil && !inflight {
			return
		}
		jobs := s.jobs
		if closing == nil || full {
			jobs = nil
		}
		// With nothing to send, the batch in flight ending changes nothing
		// until a job comes: the writer hears of it then (before adding
		// the job, as if it had heard at once), and is not woken for it.
		syncedC := synced
		if cur == nil && closing != nil {
			syncedC = nil
		}
		select {
		case j := <-jobs:
			hearSynced()
			cur = w.add(cur, j)
			if inflight && s.batched.Load() >= ackMark {
				early++
			} else {
				expect = max(expect-1, 0)
			}
		case b := <-syncedC:
			onSynced(b)
		case <-lingerC:
			lingerC, expect = nil, 0
		case <-roRetry:
			w.discardView()
			if s.tryWritable() {
				roRetry = nil
			}
		case <-closing:
			closing = nil
			for {
				select {
				case j := <-s.jobs:
					hearSynced()
					cur = w.add(cur, j)
					continue
				default:
				}
				break
			}
		}
	}
}

// indexQueue is how many acknowledged batches may wait for the indexer
// before the syncer waits for it. It must cover the commits made during a
// merge of the text index's delta, or every merge stalls a commit; a
// search may in turn wait for that many batches to be indexed.
const indexQueue = 32

// applyIdle is how long the syncer keeps an acknowledged batch out of
// badger while no next batch arrives. Readers do not wait for it: they ask
// for the apply (wantApplied).
const applyIdle = time.Millisecond

// syncer makes each batch durable, acknowledges it and has it applied to
// badger, then indexed.
//
// A batch is applied while the next one's frame is written, by an applier
// goroutine, not right after its acknowledgement: at that moment the
// acknowledged writers prepare their next puts, and an apply would hold
// the core they need, while during a frame write the cores are otherwise
// idle. With no frame to write beside it (a reader asked, nobody came
// within applyIdle, a checkpoint, the close) the syncer applies the batch
// itself: handing it to the applier then would only wake two goroutines
// per batch for nothing to overlap. The syncer alone hands batches to the
// indexer, each once badger took it, so they are indexed in the order
// badger took them, and only once it has them.
func (s *Store) syncer(in <-chan *batch, out chan<- *batch, done chan<- struct{}) {
	toIndex := make(chan *batch, indexQueue)
	indexerDone := make(chan struct{})
	go s.indexer(toIndex, indexerDone)
	applyIn, applyOut := make(chan *batch), make(chan error)
	applierDone := make(chan struct{})
	go func() {
		defer close(applierDone)
		for b := range applyIn {
			applyOut <- s.applyLocked(b)
		}
	}()
	// pending is acknowledged and not yet in badger. An apply answers
	// every reader's request so far (applyNow): startApply hands pending
	// to the applier and applied waits for it; applyPending applies it
	// here.
	var pending *batch
	takeRequests := func() {
		select {
		case <-s.applyNow:
		default:
		}
	}
	startApply := func() {
		takeRequests()
		applyIn <- pending
	}
	finish := func(err error) {
		if err != nil {
			// The batch is durable in the log, which restores it at Open.
			s.breakWith(err)
		}
		toIndex <- pending
		pending = nil
	}
	applied := func() { finish(<-applyOut) }
	applyPending := func() {
		if pending != nil {
			takeRequests()
			finish(s.applyLocked(pending))
		}
	}
	defer func() {
		close(applyIn)
		<-applierDone
		close(toIndex)
		<-indexerDone
		close(done)
	}()
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	var payload []byte
	for {
		var b *batch
		ok := true
		if pending == nil {
			b, ok = <-in
		} else {
			idle.Reset(s.opts.hooks.idleApply())
			select {
			case b, ok = <-in:
			case <-s.applyNow:
			case <-idle.C:
			}
			idle.Stop()
			if ok && b == nil { // a reader asked, or nobody came
				applyPending()
				continue
			}
		}
		if !ok {
			applyPending()
			return
		}
		var err error
		if len(b.ops) > 0 {
			// Records stay where this frame puts them; badger gets pointers.
			payload = payload[:0]
			seg, at := s.log.seg, s.log.payloadOff()
			for i := range b.ops {
				op := &b.ops[i]
				if !op.isRecordSet() {
					payload = appendOp(payload, *op)
					continue
				}
				var pos int
				payload, pos = appendSet(payload, *op)
				op.ptr = ptrTo(seg, at+int64(pos), op.val).encode()
			}
			if pending != nil {
				startApply() // beside this frame's write
			}
			err = s.broken()
			if err == nil {
				err = s.log.append(payload)
			}
			if err == nil {
				err = s.log.sync()
			}
			if pending != nil {
				applied()
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
		} else {
			applyPending()
		}
		b.write = err == nil && len(b.ops) > 0
		// Durable: acknowledge now.
		s.ackedSeq.Store(b.seq)
		s.batches.Add(1)
		s.batched.Add(int64(len(b.jobs)))
		for i, j := range b.jobs {
			j.done <- b.errs[i]
		}
		pending = b
		// The batch is durable in the log already: its callers need not
		// wait for badger's sync at a checkpoint.
		if b.write && s.log.since >= s.opts.hooks.checkpointBytes() && s.roomForCheckpoint() {
			applyPending()
			if err := s.checkpoint(); noSpace(err) {
				// Badger is not made durable, or no new segment is
				// started: the frames since the mark stay to be applied
				// again, as after a crash. Tried again at the next commit.
				s.diskFull(err, s.opts.reserve())
			} else if err != nil {
				s.breakWith(err)
			}
		}
		out <- b
	}
}

// indexer runs the after functions of batches badger has taken, in commit
// order, and reports each batch done to Search, Scan and Check (s.indexed).
func (s *Store) indexer(in <-chan *batch, done chan<- struct{}) {
	defer close(done)
	// The records found at Open first: every later batch's index work
	// (adds, and removals by forget, purge or quarantine) comes after.
	for _, t := range s.loadedTexts {
		s.idx.addTexts(t.key, t.at, t.group, t.texts)
	}
	s.loadedTexts = nil
	close(s.textsLoaded)
	for b := range in {
		if b.applied {
			for _, a := range b.afters {
				if a != nil {
					a()
					// Index work can wait; writers woken by this batch's
					// acknowledgement cannot. Yielding after each record
					// lets them prepare the next batch first.
					runtime.Gosched()
				}
			}
		}
		s.indexed.advance(b.seq)
	}
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
	s.wantApplied()
	return s.applied.wait(ctx, acked)
}

// waitIndexed returns once the indexes hold every batch acknowledged
// before the call.
func (s *Store) waitIndexed(ctx context.Context) error {
	if err := s.waitTextsLoaded(ctx); err != nil {
		return err
	}
	acked := s.ackedSeq.Load()
	if s.appliedSeq.Load() < acked {
		s.wantApplied()
	}
	return s.indexed.wait(ctx, acked)
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

// wantApplied asks the syncer to apply an acknowledged batch now rather
// than beside the next frame write.
func (s *Store) wantApplied() {
	select {
	case s.applyNow <- struct{}{}:
	default:
	}
}

// applyOps writes ops to badger in order, splitting transactions that grow
// too big (the log frame, not the transaction, is the unit of atomicity).
func applyOps(db *badger.DB, ops []walOp) error {
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for _, op := range ops {
		var err error
		for try := 0; try < 2; try++ {
			switch {
			case op.del:
				err = txn.Delete(op.key)
			case op.ptr != nil:
				err = txn.Set(op.key, op.ptr)
			default:
				err = txn.Set(op.key, op.val)
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
	errs, err := s.submit(ctx, []*job{j})
	if err != nil {
		return err
	}
	return errs[0]
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

func newJob(ctx context.Context, size int, apply func(t *wtx) (func(), error)) *job {
	return &job{ctx: ctx, size: size, apply: apply, done: make(chan error, 1)}
}

// Item is one record for PutMany.
type Item struct {
	Entry Entry
	Meta  Meta
	// Annexes are written in the record's commit when it is new (annex.go).
	Annexes []ItemAnnex
	// Terms, if set, must be Store.Terms(Entry.Texts): the index takes
	// them instead of tokenising the texts again.
	Terms *Terms
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
	res := make([]PutResult, len(items))
	jobs := make([]*job, 0, len(items))
	idx := make([]int, 0, len(items))
	for i := range items {
		e, m, annexes, terms := items[i].Entry, items[i].Meta, items[i].Annexes, items[i].Terms
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
		rec := Record{Entry: e, Meta: m}
		at := s.orderAt(&rec)
		// Encoding happens here, on the caller's goroutine, so the single
		// writer only copies bytes into the transaction; tokenising happens
		// on the indexer.
		val := encodeRecord(&rec)
		ikeys := indexKeys(&rec.Entry)
		r := &res[i]
		size := len(val) + len(e.Key)
		for _, k := range ikeys {
			size += len(k) + 16
		}
		jobs = append(jobs, newJob(ctx, size, func(t *wtx) (func(), error) {
			rk := recKey(rec.Key)
			// A key the writer does not know is new without a lookup.
			var v []byte
			found, err := false, error(nil)
			_, known := t.w.known[rec.Key]
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
			t.set(rk, val)
			for _, k := range ikeys {
				t.set(k, nil)
			}
			t.w.known[rec.Key] = struct{}{}
			setAnnexes(t, rec.Key, annexes)
			t.b.newKeys = append(t.b.newKeys, rec.Key)
			r.Record = rec
			t.count(1)
			if rec.Meta.Quarantined {
				// Kept, never surfaced: no order or text index holds it.
				s.trust.mu.Lock()
				s.trust.quarantined[rec.Key] = struct{}{}
				s.trust.mu.Unlock()
				return nil, nil
			}
			return func() {
				s.order.add(rec.Key, at, rec.Group, rec.CreatedBy)
				if terms != nil {
					s.idx.addTokens(rec.Key, at, rec.Group, &terms.rt)
				} else {
					s.idx.addTexts(rec.Key, at, rec.Group, rec.Texts)
				}
				s.lines.add(rec.Key, at, rec.Parents)
			}, nil
		}))
		idx = append(idx, i)
	}
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
