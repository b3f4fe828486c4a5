package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
