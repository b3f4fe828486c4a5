package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

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
		s.wal.close()
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
	s.lostBadgerWrites = true
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
	s.lostBadgerWrites = true
	keep, _, err := s.Put(ctx, mkEntry("kept", 1000, "whole frame"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	off := s.wal.off
	if _, _, err := s.Put(ctx, mkEntry("torn", 1001, "torn frame"), Meta{}); err != nil {
		t.Fatal(err)
	}
	crashWithoutBadger(t, s)
	// Tear the second frame: flip a byte of its payload.
	f, err := os.OpenFile(filepath.Join(dir, walFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, off+walFrameHdr+5); err != nil {
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
	// The replayed state was checkpointed and the log restarted: a purge
	// known only to the new epoch's frames must win over the old frames.
	s.lostBadgerWrites = true
	if res, err := s.PurgeBefore(ctx, 2000); err != nil || res.Deleted != 1 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	defer s.Close()
	if _, err := s.Get(ctx, keep.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a frame of an earlier epoch came back: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWALCheckpoints(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	s.walLimit = 16 << 10
	epoch := s.wal.epoch
	var keys []string
	for i := range 300 {
		e := mkEntry(fmt.Sprintf("cp-%d", i), int64(1000+i), fmt.Sprintf("checkpointed text %d", i))
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key)
	}
	settle(t, s)
	if s.wal.epoch < epoch+5 {
		t.Fatalf("expected several checkpoints, epoch went %d -> %d", epoch, s.wal.epoch)
	}
	// Writes since the last checkpoint exist only in the log (and no
	// checkpoint may follow them: badger does not have them).
	s.walLimit = 1 << 40
	s.lostBadgerWrites = true
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
	t.Logf("O_DIRECT frames in %s: %v", dir, s.wal.direct != nil)
	if s.wal.direct != nil {
		s.wal.direct.Close()
		s.wal.direct = nil
	}
	s.lostBadgerWrites = true
	var keys []string
	for i := range 20 {
		e := mkEntry(fmt.Sprintf("pc-%d", i), int64(1000+i), "page cache frame")
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key)
	}
	if s.wal.off%walAlign != 0 {
		t.Fatalf("frame end %d not block-aligned", s.wal.off)
	}
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("%s not replayed: %v", k, err)
		}
	}
}

// TestWALReplaysVersion1 replays a log in the older layout (frames without
// padding), as a store left by a crash of an earlier build has.
func TestWALReplaysVersion1(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	// Capture two frames' payloads as this build writes them, then lose them.
	s.lostBadgerWrites = true
	var payloads [][]byte
	var keys []string
	for i := range 2 {
		start := s.wal.off
		e := mkEntry(fmt.Sprintf("v1-%d", i), int64(1000+i), "older log layout")
		if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key)
		hdr := make([]byte, walFrameHdr)
		if _, err := s.wal.f.ReadAt(hdr, start); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, binary.LittleEndian.Uint32(hdr[4:]))
		if _, err := s.wal.f.ReadAt(p, start+walFrameHdr); err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, p)
	}
	epoch := s.wal.epoch
	crashWithoutBadger(t, s)

	// Rewrite the log as version 1: same epoch, frames back to back.
	f, err := os.OpenFile(filepath.Join(dir, walFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 512)
	copy(hdr, walMagicV1)
	binary.LittleEndian.PutUint64(hdr[8:], epoch)
	binary.LittleEndian.PutUint32(hdr[16:], crc32.Checksum(hdr[:16], walCRC))
	log := append([]byte(nil), hdr...)
	log = append(log, make([]byte, walDataStart-len(log))...)
	for _, p := range payloads {
		fh := binary.LittleEndian.AppendUint32(nil, walFrameMagic)
		fh = binary.LittleEndian.AppendUint32(fh, uint32(len(p)))
		fh = binary.LittleEndian.AppendUint64(fh, epoch)
		fh = binary.LittleEndian.AppendUint32(fh, crc32.Update(crc32.Checksum(fh[8:16], walCRC), walCRC, p))
		log = append(append(log, fh...), p...)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(append(log, make([]byte, walAlign)...), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = openTest(t, dir)
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("%s not replayed from a version 1 log: %v", k, err)
		}
	}
	// The log restarted in the current layout.
	s.lostBadgerWrites = true
	e := mkEntry("v2", 2000, "after the upgrade")
	if _, _, err := s.Put(ctx, e, Meta{}); err != nil {
		t.Fatal(err)
	}
	crashWithoutBadger(t, s)
	s = openTest(t, dir)
	if _, err := s.Get(ctx, e.Key); err != nil {
		t.Fatalf("write after the upgrade lost: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
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
	s.walLimit = 16 << 10
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.checkpointing = func() {
		once.Do(func() {
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
	// One put at a time, each started only once the one before returned:
	// the put in flight when the checkpoint starts is the one whose commit
	// filled the log.
	put := func(i int) <-chan error {
		errc := make(chan error, 1)
		go func() {
			e := mkEntry(fmt.Sprintf("ack-%d", i), int64(1000+i), "fills the log")
			_, _, err := s.Put(ctx, e, Meta{})
			errc <- err
		}()
		return errc
	}
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("no checkpoint after 200 puts")
		}
		errc := put(i)
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			continue
		case <-entered:
		}
		// The checkpoint has started and is held: put i must still return.
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("put %d, whose commit filled the log, waited for the checkpoint", i)
		}
		break
	}
	close(release)
	for i := 200; i < 210; i++ {
		if err := <-put(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
