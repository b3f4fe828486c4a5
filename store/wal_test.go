package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// loseBadgerWrites makes the store log and acknowledge its next writes
// without applying them to badger, as if a power loss took them from
// badger's unsynced pages: replay must restore them.
func loseBadgerWrites(s *Store) {
	s.waitApplied(context.Background()) // writes acknowledged so far are in
	s.opts.hooks.lostBadgerWrites = true
}

// crashWithoutBadger stops a store the way a power loss would leave it if
// badger had kept none of the writes since the last checkpoint: the log is
// left as written, nothing is synced or shrunk.
func crashWithoutBadger(t *testing.T, s *Store) {
	t.Helper()
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		<-s.wdone
		if err := s.db.Close(); err != nil {
			t.Error(err)
		}
		s.log.close()
	})
}

func TestWALReplayRestoresAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	base, _, err := s.Put(ctx, mkEntry("base", 1000, "before the loss"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPeer(ctx, Peer{NodeID: "peer-1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	loseBadgerWrites(s)
	var items []Item
	for i := range 50 {
		e := mkEntry(fmt.Sprintf("lost-%d", i), int64(2000+i), fmt.Sprintf("replayed text %d", i))
		if i > 0 {
			e.Parents = []string{items[i-1].Entry.Key}
		}
		items = append(items, Item{Entry: e})
	}
	res, err := s.PutMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := s.MarkKept(ctx, base.Key, true); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePeer(ctx, "peer-1"); err != nil {
		t.Fatal(err)
	}
	crashWithoutBadger(t, s)

	s = openTest(t, dir)
	defer s.Close()
	if got := s.Count(); got != 51 {
		t.Fatalf("count after replay = %d, want 51", got)
	}
	for _, it := range items {
		rec, err := s.Get(ctx, it.Entry.Key)
		if err != nil {
			t.Fatalf("acknowledged %s lost: %v", it.Entry.Key, err)
		}
		if string(rec.Raw) != string(it.Entry.Raw) {
			t.Fatalf("%s: raw differs after replay", it.Entry.Key)
		}
	}
	rec, err := s.Get(ctx, base.Key)
	if err != nil || !rec.Meta.Kept {
		t.Fatalf("kept flag not replayed: %+v %v", rec.Meta, err)
	}
	if _, err := s.GetPeer(ctx, "peer-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("peer deletion not replayed: %v", err)
	}
	hits, err := s.Search(ctx, "replayed", SearchOptions{Limit: 100})
	if err != nil || len(hits) != 50 {
		t.Fatalf("search after replay: %d hits, %v", len(hits), err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWALIgnoresTornAndStaleFrames(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	loseBadgerWrites(s)
	keep, _, err := s.Put(ctx, mkEntry("kept", 1000, "whole frame"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	off, seg := s.log.off, s.log.seg
	if _, _, err := s.Put(ctx, mkEntry("torn", 1001, "torn frame"), Meta{}); err != nil {
		t.Fatal(err)
	}
	crashWithoutBadger(t, s)
	// Tear the second frame: flip a byte of its payload.
	f, err := os.OpenFile(filepath.Join(dir, segName(seg)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, off+segFrameHdr+5); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = openTest(t, dir)
	if _, err := s.Get(ctx, keep.Key); err != nil {
		t.Fatalf("whole frame not replayed: %v", err)
	}
	if _, err := s.Get(ctx, testKey("torn")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("torn frame replayed: %v", err)
	}
	// The replayed state was made durable and the log goes on after the
	// last whole frame: a purge known only to frames written since must win
	// over the frames before, and over what is left of the torn one.
	loseBadgerWrites(s)
	if res, err := s.PurgeBefore(ctx, 2000); err != nil || res.Deleted != 1 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	defer s.Close()
	if _, err := s.Get(ctx, keep.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a frame from before the replay mark came back: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWALCheckpoints(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	s.opts.hooks.walLimit = 16 << 10
	seg, _ := s.log.current()
	var keys []string
	for i := range 300 {
		e := mkEntry(fmt.Sprintf("cp-%d", i), int64(1000+i), fmt.Sprintf("checkpointed text %d", i))
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key)
	}
	settle(t, s)
	if now, marked := s.log.current(); now < seg+5 || marked != now {
		t.Fatalf("expected several checkpoints: segment %d -> %d, replay mark in %d", seg, now, marked)
	}
	// Writes since the last checkpoint exist only in the log (and no
	// checkpoint may follow them: badger does not have them).
	s.opts.hooks.walLimit = 1 << 40
	loseBadgerWrites(s)
	for i := range 5 {
		e := mkEntry(fmt.Sprintf("tail-%d", i), int64(5000+i), "after the last checkpoint")
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key)
	}
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	defer s.Close()
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if s.Count() != len(keys) {
		t.Fatalf("count %d, want %d", s.Count(), len(keys))
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWALPageCachePath replays frames written without O_DIRECT, as on file
// systems that refuse it (tmpfs), and checks that the path it normally takes
// is the direct one where the test directory allows it.
func TestWALPageCachePath(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	t.Logf("O_DIRECT frames in %s: %v", dir, s.log.direct != nil)
	if s.log.direct != nil {
		s.log.direct.Close()
		s.log.direct = nil
	}
	loseBadgerWrites(s)
	var keys []string
	for i := range 20 {
		e := mkEntry(fmt.Sprintf("pc-%d", i), int64(1000+i), "page cache frame")
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key)
	}
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("%s not replayed: %v", k, err)
		}
	}
}

func setFormat(t *testing.T, dir, v string) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error { return txn.Set(formatKey, []byte(v)) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func readFormat(t *testing.T, dir string) string {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	err = db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(formatKey)
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}

// settle waits until the writer has finished with every batch before it,
// including a checkpoint that follows an acknowledgement.
func settle(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	noop := newJob(ctx, 0, func(*wtx) (func(), error) { return nil, nil })
	if _, err := s.submit(ctx, []*job{noop}); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointAfterAcknowledgement: the commit that fills the log is
// acknowledged before the checkpoint it triggers, which its callers need
// not wait for (badger's sync takes ~25 ms).
func TestCheckpointAfterAcknowledgement(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	defer s.Close()
	s.opts.hooks.walLimit = 16 << 10
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// Jobs of the commits before the checkpoint, the one that filled the
	// log included.
	var due int64
	s.opts.hooks.checkpointing = func() {
		once.Do(func() {
			due = s.batched.Load()
			close(entered)
			<-release
		})
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	// One put at a time, each started once the one before returned.
	var returned atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for i := range 210 {
			e := mkEntry(fmt.Sprintf("ack-%d", i), int64(1000+i), "fills the log")
			if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
				errc <- err
				return
			}
			returned.Add(1)
		}
		errc <- nil
	}()
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("no checkpoint after 210 puts: %v", err)
	}
	// The checkpoint has started and is held: every put it follows must
	// have returned, the one whose commit filled the log included.
	deadline := time.Now().Add(5 * time.Second)
	for returned.Load() < due {
		if time.Now().After(deadline) {
			t.Fatalf("%d puts returned while the checkpoint after %d commits' puts is held", returned.Load(), due)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentsCompactAfterPurge: a purge gives back the log space of the
// records it deleted, and the records it keeps survive being moved, a
// reopen and Check.
func TestSegmentsCompactAfterPurge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.UnixMilli(testBase + 100*3600*1000)
	opts := Options{Now: func() time.Time { return now }}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.opts.hooks.walLimit = 256 << 10
	const n, keep = 3000, 200
	c := newCorpus(11)
	var kept []Entry
	var items []Item
	for i := range n {
		at := testBase + int64(i)
		if i%(n/keep) == 0 {
			at = now.UnixMilli() - int64(i) // recent, spread over all segments
		}
		e := c.record(i, at)
		if at > testBase+n {
			kept = append(kept, e)
		}
		items = append(items, Item{Entry: e})
		if len(items) == 100 {
			if _, err := s.PutMany(ctx, items); err != nil {
				t.Fatal(err)
			}
			items = items[:0]
		}
	}
	settle(t, s)
	segsBefore, bytesBefore := logBytes(t, s)
	res, err := s.Purge(ctx, time.Hour)
	if err != nil || res.Deleted != n-len(kept) {
		t.Fatalf("purge: %+v %v (want %d deleted)", res, err, n-len(kept))
	}
	segsAfter, bytesAfter := logBytes(t, s)
	t.Logf("log: %d segments, %d bytes → %d segments, %d bytes", segsBefore, bytesBefore, segsAfter, bytesAfter)
	if bytesAfter > bytesBefore/4 || segsAfter >= segsBefore {
		t.Fatalf("log not compacted: %d segments, %d bytes → %d, %d", segsBefore, bytesBefore, segsAfter, bytesAfter)
	}
	mustHoldExactly(t, s, kept)
	// A crash after the compaction: replay from the mark, which needs none
	// of the removed segments, keeps every record.
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	defer s.Close()
	mustHoldExactly(t, s, kept)
}

// mustHoldExactly checks that s holds the records want, byte for byte,
// and nothing else, and passes Check.
func mustHoldExactly(t *testing.T, s *Store, want []Entry) {
	t.Helper()
	ctx := context.Background()
	if s.Count() != len(want) {
		t.Fatalf("count %d, want %d", s.Count(), len(want))
	}
	for _, e := range want {
		got, err := s.Get(ctx, e.Key)
		if err != nil || !bytes.Equal(got.Raw, e.Raw) {
			t.Fatalf("%s: %v", e.Key, err)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// logBytes counts the segments and the bytes their frames take (the
// current segment's zero-filled room left out).
func logBytes(t *testing.T, s *Store) (int, int64) {
	t.Helper()
	n, total := segmentBytes(t, s.dir)
	return n, total - s.log.size + s.log.off
}

func segmentBytes(t *testing.T, dir string) (int, int64) {
	t.Helper()
	return filesSize(t, dir, func(name string) bool {
		return strings.HasPrefix(name, segPrefix) && strings.HasSuffix(name, segSuffix)
	})
}

// TestReopenAppendsToSegment: a clean close leaves the log ready to go on
// where it ended, so opening a store does not start a segment each time,
// and what is written across reopens stays.
func TestReopenAppendsToSegment(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var keys []string
	for i := range 5 {
		s := openTest(t, dir)
		for j := range 3 {
			e := mkEntry(fmt.Sprintf("r%d-%d", i, j), int64(1000+10*i+j), "across reopens")
			mustPut(t, s, e)
			keys = append(keys, e.Key)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if segs, _ := segmentBytes(t, dir); segs != 1 {
		t.Fatalf("%d segments after five clean reopens, want 1", segs)
	}
	s := openTest(t, dir)
	defer s.Close()
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorruptRecordInLog: a record whose bytes in the log changed is
// reported, by Get, by Check and by Open, with its key.
func TestCorruptRecordInLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	good, bad := mkEntry("good", 1000, "intact"), mkEntry("bad", 1001, "flipped")
	mustPut(t, s, good)
	seg, off := s.log.seg, s.log.payloadOff()
	mustPut(t, s, bad)
	f, err := os.OpenFile(filepath.Join(dir, segName(seg)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Well inside the record: past its key, in its texts.
	if _, err := f.WriteAt([]byte("X"), off+int64(len(bad.Key))+80); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.Get(ctx, good.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, bad.Key); !errors.Is(err, ErrCorrupted) {
		t.Fatalf("Get of a changed record: %v", err)
	}
	err = s.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), bad.Key) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Check: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), bad.Key) {
		t.Fatalf("Open: %v", err)
	}
}

// TestLogReads: a pointer reads its record back from the file, and one
// whose bytes differ, or whose segment is gone, is refused.
func TestLogReads(t *testing.T) {
	dir := t.TempDir()
	f, nonce, err := createSegment(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	l := &segLog{dir: dir, files: map[uint32]*os.File{}}
	if err := l.openAppend(f, 1, nonce, segDataStart); err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var ptrs []segPtr
	for i := range 3 {
		val := bytes.Repeat([]byte{byte('a' + i)}, 1000+3000*i) // frames across block boundaries
		payload, pos := appendSet(nil, walOp{key: []byte{pRec, byte(i)}, val: val})
		ptrs = append(ptrs, ptrTo(1, l.payloadOff()+int64(pos), val))
		if err := l.append(payload); err != nil {
			t.Fatal(err)
		}
		if err := l.sync(); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range ptrs {
		got, err := l.read(p)
		if err != nil || len(got) != int(p.n) || got[0] != byte('a'+i) || got[len(got)-1] != byte('a'+i) {
			t.Fatalf("read %+v: %d bytes, %v", p, len(got), err)
		}
		q, err := decodePtr(p.encode())
		if err != nil || q != p {
			t.Fatalf("pointer %+v comes back as %+v, %v", p, q, err)
		}
	}
	// The frames, read back as replay does, are the ones written.
	n := 0
	end, err := scanFrames(f, nonce, segDataStart, l.off, func(int64, []byte) error { n++; return nil })
	if err != nil || n != 3 || end != l.off {
		t.Fatalf("scan: %d frames to %d (log ends at %d), %v", n, end, l.off, err)
	}
	bad := ptrs[0]
	bad.crc++
	if _, err := l.read(bad); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("changed bytes: %v", err)
	}
	bad.seg = 9
	if _, err := l.read(bad); !errors.Is(err, errSegmentGone) {
		t.Fatalf("missing segment: %v", err)
	}
	for _, v := range [][]byte{nil, {recPtrTag}, {recPtrTag, 1, 2}, append(ptrs[0].encode(), 0)} {
		if _, err := decodePtr(v); err == nil {
			t.Fatalf("decoded malformed pointer %x", v)
		}
	}
}

// TestFailedFrameLeavesNoPointer: badger takes a batch only once its frame
// is durable, so a log write that fails leaves nothing to read, now or
// after a restart (with the records in badger and the frame lost, a
// pointer would lead nowhere).
func TestFailedFrameLeavesNoPointer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	before := mkEntry("before", 1000, "stored")
	mustPut(t, s, before)
	// The next frame write fails: its descriptors are gone.
	if s.log.direct != nil {
		s.log.direct.Close()
	}
	s.log.f.Close()
	lost := mkEntry("lost", 1001, "never durable")
	lost.Parents = []string{before.Key}
	if _, _, err := s.Put(ctx, lost, Meta{}); err == nil {
		t.Fatal("put acknowledged after its log write failed")
	}
	if _, err := s.Get(ctx, lost.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the failed write is readable: %v", err)
	}
	if kids, err := s.Children(ctx, before.Key); err != nil || len(kids) != 0 {
		t.Fatalf("the failed write's lineage edge is there: %v %v", kids, err)
	}
	if _, _, err := s.Put(ctx, mkEntry("after", 1002, "refused"), Meta{}); err == nil || !strings.Contains(err.Error(), "refuses writes") {
		t.Fatalf("a store whose log failed took another write: %v", err)
	}
	s.Close()
	s = openTest(t, dir)
	defer s.Close()
	if _, err := s.Get(ctx, lost.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after reopen: %v", err)
	}
	if _, err := s.Get(ctx, before.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMissingSegmentRefused: a store whose log lost the segment that
// replay must start from is refused, with the segment named, rather than
// opened without the writes in it.
func TestMissingSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	mustPut(t, s, mkEntry("x", 1000, "in segment 1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, segName(1))); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), "segment 1") {
		t.Fatalf("Open without the log: %v", err)
	}
}

// TestSegmentHeader: a segment whose header was torn as it was created
// (nothing after it) is started again; one with frames after a bad header
// is refused, not emptied.
func TestSegmentHeader(t *testing.T) {
	for _, c := range []struct {
		name   string
		frames bool
	}{{"torn at creation", false}, {"damaged later", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s := openTest(t, dir)
			e := mkEntry("x", 1000, "behind the header")
			if c.frames {
				mustPut(t, s, e)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, segName(1))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("XX"), 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
			s, err = Open(dir, Options{})
			if c.frames {
				if !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), "segment 1") {
					t.Fatalf("Open with a damaged header before frames: %v", err)
				}
				if fi, err := os.Stat(path); err != nil || fi.Size() <= segDataStart {
					t.Fatalf("the segment was emptied: %v %v", fi, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			mustPut(t, s, e)
			if _, err := s.Get(ctx, e.Key); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// within fails the test if fn has not returned after d: a reader that
// waited for an apply nobody starts would block for good.
func within(t *testing.T, what string, d time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s still waiting after %v", what, d)
	}
}

// TestReadersSeeTheLastPut: a put's callers are told it is durable before
// badger takes it, so every reader waits for that apply: with no write
// after it, each reader still sees the last acknowledged put at once.
func TestReadersSeeTheLastPut(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	parent := mkEntry("parent", 1000, "alpha")
	mustPut(t, s, parent)
	var last Entry
	put := func(name string) {
		t.Helper()
		last = mkEntry(name, 2000+int64(len(name)), "beta "+name)
		last.Parents = []string{parent.Key}
		mustPut(t, s, last)
	}
	readers := []struct {
		name string
		read func() error
	}{
		{"Get", func() error {
			r, err := s.Get(ctx, last.Key)
			if err == nil && r.Key != last.Key {
				err = fmt.Errorf("got %s", r.Key)
			}
			return err
		}},
		{"Has", func() error {
			if ok, err := s.Has(ctx, last.Key); !ok || err != nil {
				return fmt.Errorf("has=%v err=%v", ok, err)
			}
			return nil
		}},
		{"Children", func() error {
			kids, err := s.Children(ctx, parent.Key)
			if err == nil && !slices.Contains(kids, last.Key) {
				err = fmt.Errorf("children %v lack %s", kids, last.Key)
			}
			return err
		}},
		{"Count", func() error {
			if n := s.Count(); n < 2 {
				return fmt.Errorf("count %d", n)
			}
			return nil
		}},
		{"Search", func() error {
			hits, err := s.Search(ctx, "beta Search", SearchOptions{})
			if err == nil && (len(hits) == 0 || hits[0].Key != last.Key) {
				err = fmt.Errorf("hits %v", hits)
			}
			return err
		}},
		{"Scan", func() error {
			var keys []string
			err := s.Scan(ctx, Window{Group: last.Group}, func(k KeyTime) error {
				keys = append(keys, k.Key)
				return nil
			})
			if err == nil && !slices.Contains(keys, last.Key) {
				err = fmt.Errorf("scan %v lacks %s", keys, last.Key)
			}
			return err
		}},
		{"Check", func() error { return s.Check(ctx) }},
	}
	for _, r := range readers {
		put(r.name)
		within(t, r.name, 20*time.Second, r.read)
	}
	// The roster is written through the same batches.
	if _, err := s.PutPeer(ctx, Peer{NodeID: "peer-1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	within(t, "GetPeer", 20*time.Second, func() error {
		_, err := s.GetPeer(ctx, "peer-1")
		return err
	})
}

// TestIdleApply: with no next write and no reader, an acknowledged batch
// still reaches badger and the indexes.
func TestIdleApply(t *testing.T) {
	s := openTest(t, t.TempDir())
	mustPut(t, s, mkEntry("alone", 1000, "nobody reads this"))
	acked := s.ackedSeq.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.applied.wait(ctx, acked); err != nil {
		t.Fatalf("batch %d never applied: %v", acked, err)
	}
	if err := s.indexed.wait(ctx, acked); err != nil {
		t.Fatalf("batch %d never indexed: %v", acked, err)
	}
}
