package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

const testBase = int64(1_751_000_000_000)

func testKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return "cmb1-" + hex.EncodeToString(h[:])
}

// mkEntry builds a record; texts default to "neutral".
func mkEntry(name string, at int64, texts ...string) Entry {
	e := Entry{Key: testKey(name), CreatedBy: "author-" + name[:1], CreatedAt: at, Group: "g1"}
	for i := range e.Texts {
		e.Texts[i] = "neutral"
		if i < len(texts) && texts[i] != "" {
			e.Texts[i] = texts[i]
		}
	}
	e.Raw = []byte(fmt.Sprintf(`{"key":%q,"createdAt":%d, "odd spacing" :true}`, e.Key, at))
	return e
}

func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustPut(t testing.TB, s *Store, e Entry) {
	t.Helper()
	if _, dup, err := s.Put(context.Background(), e, Meta{Source: "local"}); err != nil || dup {
		t.Fatalf("Put %s: dup=%v err=%v", e.Key, dup, err)
	}
}

func TestPutGetDuplicate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	e := mkEntry("a1", testBase, "hello world")
	e.To = "someone"
	e.Parents = []string{testKey("p")}
	e.Ancestors = []string{testKey("root"), testKey("p")}
	stored := time.UnixMilli(testBase + 5)
	rec, dup, err := s.Put(ctx, e, Meta{StoredAt: stored, Source: "peer-7", Verified: true, Decrypted: true, Directed: true})
	if err != nil || dup {
		t.Fatalf("first Put: dup=%v err=%v", dup, err)
	}
	if rec.Meta.Source != "peer-7" {
		t.Fatalf("returned meta %+v", rec.Meta)
	}
	got, err := s.Get(ctx, e.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Raw, e.Raw) {
		t.Fatalf("raw changed: %q", got.Raw)
	}
	if got.CreatedAt != e.CreatedAt || got.To != "someone" || got.Group != "g1" || got.Texts != e.Texts ||
		strings.Join(got.Ancestors, ",") != strings.Join(e.Ancestors, ",") || got.Parents[0] != e.Parents[0] {
		t.Fatalf("entry changed: %+v", got.Entry)
	}
	m := got.Meta
	if !m.StoredAt.Equal(stored) || m.Source != "peer-7" || !m.Verified || !m.Decrypted || !m.Directed || m.Kept {
		t.Fatalf("meta changed: %+v", m)
	}

	// Same key again, even with different bytes and metadata: the stored one wins.
	e2 := e
	e2.Raw = []byte(`{"different":true}`)
	rec, dup, err = s.Put(ctx, e2, Meta{Source: "peer-8"})
	if err != nil || !dup {
		t.Fatalf("duplicate Put: dup=%v err=%v", dup, err)
	}
	if !bytes.Equal(rec.Raw, e.Raw) || rec.Meta.Source != "peer-7" {
		t.Fatalf("duplicate returned %q from %s, want the stored record", rec.Raw, rec.Meta.Source)
	}
	if s.Count() != 1 {
		t.Fatalf("count %d", s.Count())
	}
	if ok, _ := s.Has(ctx, e.Key); !ok {
		t.Fatal("Has false")
	}
	if ok, _ := s.Has(ctx, testKey("nope")); ok {
		t.Fatal("Has true for missing key")
	}
	if _, err := s.Get(ctx, testKey("nope")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if _, _, err := s.Put(ctx, Entry{}, Meta{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	// Duplicates inside one batch: the second sees the first.
	b := mkEntry("batch", testBase)
	res, err := s.PutMany(ctx, []Item{{Entry: b}, {Entry: b}})
	if err != nil || res[0].Duplicate || !res[1].Duplicate {
		t.Fatalf("PutMany dup handling: %+v %v", res, err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentPutsShareCommits(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	var wg sync.WaitGroup
	const writers, each = 8, 100
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Writers overlap on half their keys to exercise dedup under load.
				name := fmt.Sprintf("w%d-%d", w%4, i)
				if _, _, err := s.Put(ctx, mkEntry(name, testBase+int64(i), "text "+name), Meta{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s.Count() != 4*each {
		t.Fatalf("count %d, want %d", s.Count(), 4*each)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Synchronous writers acknowledged together come back together: the
	// writer waits for them, so commits hold several puts, not one each.
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(st.CommittedJobs) / float64(st.Commits); per < 2 {
		t.Fatalf("%d puts in %d commits (%.2f per commit): writers are not sharing commits", st.CommittedJobs, st.Commits, per)
	}
	t.Logf("%d puts in %d commits", st.CommittedJobs, st.Commits)
}

func TestIndexes(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	root := mkEntry("root", testBase)
	a := mkEntry("a", testBase+10)
	a.Parents, a.Ancestors = []string{root.Key}, []string{root.Key}
	b := mkEntry("b", testBase+20)
	b.Parents, b.Ancestors = []string{root.Key}, []string{root.Key}
	c := mkEntry("c", testBase+30)
	c.Group = "g2"
	c.Parents, c.Ancestors = []string{a.Key, b.Key}, []string{root.Key, a.Key, b.Key}
	for _, e := range []Entry{c, b, a, root} { // children before parents: edges need no parent
		mustPut(t, s, e)
	}

	keys := func(w Window) []string {
		var out []string
		if err := s.Scan(ctx, w, func(kt KeyTime) error { out = append(out, kt.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	eq := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
	eq("all groups", keys(Window{AnyGroup: true}), root.Key, a.Key, b.Key, c.Key)
	eq("window", keys(Window{AnyGroup: true, From: testBase + 10, To: testBase + 30}), a.Key, b.Key)
	eq("reverse", keys(Window{AnyGroup: true, Reverse: true, Limit: 2}), c.Key, b.Key)
	eq("reverse window", keys(Window{AnyGroup: true, Reverse: true, From: testBase + 1, To: testBase + 30}), b.Key, a.Key)
	eq("group g1", keys(Window{Group: "g1"}), root.Key, a.Key, b.Key)
	eq("group g2", keys(Window{Group: "g2"}), c.Key)
	eq("author", keys(Window{Author: "author-a"}), a.Key)
	eq("empty group means the empty group", keys(Window{}))
	since, _ := s.KeysSince(ctx, "g1", testBase+10, 0)
	if len(since) != 2 || since[0].Key != a.Key || since[1].CreatedAt != testBase+20 {
		t.Fatalf("KeysSince %v", since)
	}
	recent, _ := s.Recent(ctx, "g1", 1)
	if len(recent) != 1 || recent[0].Key != b.Key {
		t.Fatalf("Recent %v", recent)
	}
	ch, _ := s.Children(ctx, root.Key)
	eq("children", sorted(ch), sorted([]string{a.Key, b.Key})...)
	ch, _ = s.Children(ctx, a.Key)
	eq("children of a", ch, c.Key)
	refs, _ := s.ReferencedBy(ctx, root.Key)
	eq("referenced by", sorted(refs), sorted([]string{a.Key, b.Key, c.Key})...)

	// Buckets: same key set → same digest; any difference shows.
	bk, err := s.Buckets(ctx, "g1", 0, 0, 20)
	if err != nil || len(bk) != 2 || bk[0].Count != 2 || bk[1].Count != 1 {
		t.Fatalf("buckets %+v %v", bk, err)
	}
	other := openTest(t, t.TempDir())
	for _, e := range []Entry{root, a, b} {
		mustPut(t, other, e)
	}
	bk2, _ := other.Buckets(ctx, "g1", 0, 0, 20)
	if len(bk2) != 2 || bk2[0] != bk[0] || bk2[1] != bk[1] {
		t.Fatalf("equal holdings, different buckets: %+v vs %+v", bk, bk2)
	}
	mustPut(t, other, mkEntry("extra", testBase+12))
	bk2, _ = other.Buckets(ctx, "g1", 0, 0, 20)
	if bk2[0] == bk[0] || bk2[1] != bk[1] {
		t.Fatalf("difference not localised: %+v vs %+v", bk, bk2)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func sorted(l []string) []string {
	out := append([]string(nil), l...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want []Entry
	for i := range 50 {
		e := mkEntry(fmt.Sprintf("r%d", i), testBase+int64(i), fmt.Sprintf("topic%d shared words", i%5))
		if i > 0 {
			e.Parents, e.Ancestors = []string{want[i-1].Key}, []string{want[i-1].Key}
		}
		want = append(want, e)
	}
	if _, err := s.PutMany(ctx, itemsOf(want)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPeer(ctx, Peer{NodeID: "n1", Ed25519: []byte{1, 2}, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkKept(ctx, want[3].Key, true); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Search(ctx, "topic3", SearchOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, want[0].Key); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}

	s = openTest(t, dir)
	if s.Count() != len(want) {
		t.Fatalf("count after reopen %d", s.Count())
	}
	for _, e := range want {
		got, err := s.Get(ctx, e.Key)
		if err != nil || !bytes.Equal(got.Raw, e.Raw) {
			t.Fatalf("%s after reopen: %v", e.Key, err)
		}
	}
	if got, _ := s.Get(ctx, want[3].Key); !got.Meta.Kept {
		t.Fatal("kept flag lost")
	}
	if p, err := s.GetPeer(ctx, "n1"); err != nil || p.Name != "one" {
		t.Fatalf("peer after reopen: %+v %v", p, err)
	}
	after, _ := s.Search(ctx, "topic3", SearchOptions{})
	if len(after) != 10 || len(after) != len(before) {
		t.Fatalf("search after reopen: %d hits, before %d", len(after), len(before))
	}
	for i := range after {
		if after[i].Key != before[i].Key || after[i].Score != before[i].Score {
			t.Fatalf("search changed across reopen at %d: %+v vs %+v", i, after[i], before[i])
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func itemsOf(es []Entry) []Item {
	out := make([]Item, len(es))
	for i, e := range es {
		out[i] = Item{Entry: e}
	}
	return out
}

func TestOpenErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home", "store")
	s := openTest(t, dir)
	_ = s
	_, err := Open(dir, Options{Home: "/some/home"})
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.Dir != dir || le.Home != "/some/home" {
		t.Fatalf("second Open: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "/some/home") || !strings.Contains(msg, dir) {
		t.Fatalf("locked message does not name the store and home: %s", msg)
	}

	t.Run("permission", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores file modes")
		}
		d := filepath.Join(t.TempDir(), "locked")
		if err := os.Mkdir(d, 0o000); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(filepath.Join(d, "store"), Options{}); !errors.Is(err, ErrPermission) {
			t.Fatalf("unreadable dir: %v", err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, []byte("x"), 0o600)
		if _, err := Open(f, Options{}); err == nil {
			t.Fatal("opened a file as a store")
		}
	})
	t.Run("corrupted", func(t *testing.T) {
		d := t.TempDir()
		s, err := Open(d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, s, mkEntry("x", testBase))
		s.Close()
		if err := os.WriteFile(filepath.Join(d, "MANIFEST"), bytes.Repeat([]byte{0xde, 0xad}, 64), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(d, Options{}); !errors.Is(err, ErrCorrupted) {
			t.Fatalf("garbage manifest: %v", err)
		}
	})
	t.Run("corrupted record", func(t *testing.T) {
		d := t.TempDir()
		s := openTest(t, d)
		rec := mkEntry("x", testBase)
		mustPut(t, s, rec)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := badger.Open(badger.DefaultOptions(d).WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(txn *badger.Txn) error { return txn.Set(recKey(rec.Key), []byte{0xde, 0xad}) })
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		// A first failed Open, so that what the runtime opens once, on first
		// use, is not counted as a leak.
		if s, err := Open(d, Options{}); err == nil {
			s.Close()
			t.Fatal("a store with a corrupted record opened")
		}
		fds := openFDs(t)
		_, err = Open(d, Options{})
		if !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), rec.Key) || !strings.Contains(err.Error(), d) {
			t.Fatalf("corrupted record value: %v", err)
		}
		// A failed Open leaves nothing open behind it.
		if n := openFDs(t); n > fds {
			t.Fatalf("%d file descriptors before a failed Open, %d after", fds, n)
		}
	})
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors here: %v", err)
	}
	return len(ents)
}

func TestPeerRoster(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(testBase)
	s, err := Open(t.TempDir(), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ed, x := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	up, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: ed, Name: "alpha"})
	p := up.Peer
	if err != nil || !up.Changed || !p.FirstSeen.Equal(now) || !p.LastSeen.Equal(now) {
		t.Fatalf("first sight: %+v %v", up, err)
	}
	// Later sighting: same key, new name, X25519 learnt.
	now = now.Add(time.Hour)
	up, err = s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: ed, X25519: x, Name: "alpha2"})
	p = up.Peer
	if err != nil || p.Name != "alpha2" || !bytes.Equal(p.X25519, x) || !p.LastSeen.Equal(now) || !p.FirstSeen.Equal(time.UnixMilli(testBase)) {
		t.Fatalf("update: %+v %v", p, err)
	}
	// A sighting without keys (e.g. name only) keeps the pins.
	if up, err = s.PutPeer(ctx, Peer{NodeID: "node-a"}); err != nil || !bytes.Equal(up.Peer.Ed25519, ed) {
		t.Fatalf("keyless sighting: %+v %v", up, err)
	}
	for _, bad := range []Peer{
		{NodeID: "node-a", Ed25519: bytes.Repeat([]byte{9}, 32)},
		{NodeID: "node-a", Ed25519: ed, X25519: bytes.Repeat([]byte{9}, 32)},
	} {
		_, err := s.PutPeer(ctx, bad)
		var kc *KeyConflictError
		if !errors.Is(err, ErrKeyConflict) || !errors.As(err, &kc) || kc.NodeID != "node-a" {
			t.Fatalf("conflict not refused: %v", err)
		}
		if !strings.Contains(err.Error(), "node-a") || !strings.Contains(err.Error(), "pinned") {
			t.Fatalf("unclear conflict message: %v", err)
		}
	}
	got, _ := s.GetPeer(ctx, "node-a")
	if !bytes.Equal(got.Ed25519, ed) || got.Name != "alpha2" {
		t.Fatalf("conflict changed the roster: %+v", got)
	}
	s.PutPeer(ctx, Peer{NodeID: "node-b", Ed25519: x})
	all, err := s.Peers(ctx)
	if err != nil || len(all) != 2 || all[0].NodeID != "node-a" || all[1].NodeID != "node-b" {
		t.Fatalf("Peers: %+v %v", all, err)
	}
	if _, err := s.GetPeer(ctx, "node-z"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing peer: %v", err)
	}
	if err := s.DeletePeer(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPeer(ctx, Peer{NodeID: "node-a", Ed25519: bytes.Repeat([]byte{9}, 32)}); err != nil {
		t.Fatalf("re-pin after delete: %v", err)
	}
}

func TestPurgeKeepsLineage(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(testBase + 1000*3600*1000)
	s, err := Open(t.TempDir(), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := testBase
	fresh := now.UnixMilli() - 1000
	// old chain: root ← mid ← leaf(old). fresh ← refers to mid only via ancestors.
	root := mkEntry("root", old, "root text")
	mid := mkEntry("mid", old+1, "mid text")
	mid.Parents, mid.Ancestors = []string{root.Key}, []string{root.Key}
	oldLeaf := mkEntry("oldleaf", old+2, "old leaf")
	oldLeaf.Parents, oldLeaf.Ancestors = []string{mid.Key}, []string{root.Key, mid.Key}
	// A fresh remix whose direct parent is missing locally: it protects its
	// ancestors through the ancestors list alone.
	newLeaf := mkEntry("newleaf", fresh, "new leaf")
	newLeaf.Parents, newLeaf.Ancestors = []string{testKey("absent")}, []string{root.Key, mid.Key, testKey("absent")}
	lonely := mkEntry("lonely", old+3, "lonely text")
	kept := mkEntry("kept", old+4, "kept text")
	keptChild := mkEntry("keptparent", old+5, "parent of kept")
	kept.Parents, kept.Ancestors = []string{keptChild.Key}, []string{keptChild.Key}
	for _, e := range []Entry{root, mid, oldLeaf, newLeaf, lonely, kept, keptChild} {
		mustPut(t, s, e)
	}
	if err := s.MarkKept(ctx, kept.Key, true); err != nil {
		t.Fatal(err)
	}
	res, err := s.Purge(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 6 || res.Deleted != 2 || res.Protected != 4 {
		t.Fatalf("purge result %+v", res)
	}
	has := func(e Entry) bool { ok, _ := s.Has(ctx, e.Key); return ok }
	for _, e := range []Entry{root, mid, newLeaf, kept, keptChild} {
		if !has(e) {
			t.Fatalf("%s purged but protected", e.Key)
		}
	}
	for _, e := range []Entry{oldLeaf, lonely} {
		if has(e) {
			t.Fatalf("%s not purged", e.Key)
		}
	}
	if hits, _ := s.Search(ctx, "lonely", SearchOptions{}); len(hits) != 0 {
		t.Fatalf("purged record still searchable: %v", hits)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the last descendant ages out, the ancestors go on the next cycle.
	now = now.Add(2 * time.Hour)
	if err := s.MarkKept(ctx, kept.Key, false); err != nil {
		t.Fatal(err)
	}
	res, err = s.Purge(ctx, time.Hour)
	if err != nil || res.Deleted != 5 || s.Count() != 0 {
		t.Fatalf("second purge %+v %v count=%d", res, err, s.Count())
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCheckReportsDisagreement(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	a := mkEntry("a", testBase, "alpha")
	b := mkEntry("b", testBase+1, "beta")
	b.Parents, b.Ancestors = []string{a.Key}, []string{a.Key}
	mustPut(t, s, a)
	mustPut(t, s, b)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Break things behind the store's back.
	txn := s.db.NewTransaction(true)
	txn.Delete(edgeKey(pChild, a.Key, b.Key))
	txn.Set(edgeKey(pRefBy, a.Key, testKey("ghost")), nil)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	s.idx.add(testKey("phantom"), testBase, "g1", s.idx.analyze([NumFields]string{"phantom"}))
	s.order.add(testKey("ghost"), testBase+99, "g9", "author-g")
	err := s.Check(ctx)
	var ce *CheckError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupted) {
		t.Fatalf("Check: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"lacks child index entry", "names a missing record",
		"time order holds 3 entries, want 2", `group "g9" order holds 1 entries, want 0`, "phantom"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Check report lacks %q: %s", want, msg)
		}
	}
}

// TestValueLogCompaction: compactValueLog (run after every purge that
// deleted something) gives back the value-log space of superseded roster
// entries, the values big enough for badger's value log, and the entries
// it keeps survive the rewrite, a reopen and Check.
func TestValueLogCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{MemTableBytes: 1 << 20, ValueLogFileBytes: 1 << 20}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const peers, rounds = 40, 100
	pad := strings.Repeat("x", 1000)
	put := func(round int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range peers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := Peer{NodeID: fmt.Sprintf("peer-%d", i), Name: fmt.Sprintf("%s round %d", pad, round)}
				if _, err := s.PutPeer(ctx, p); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	for r := range rounds {
		put(r)
	}
	// Badger learns which value-log bytes are garbage when compaction drops
	// the superseded versions: each reopen flushes the memtable into one
	// more level-0 table, and Flatten compacts them into the next level.
	vlogBefore := vlogBytes(t, dir)
	for r := range 6 {
		put(rounds + r)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s, err = Open(dir, opts); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("%s round %d", pad, rounds+5)
	if err := s.db.Flatten(1); err != nil {
		t.Fatal(err)
	}
	if err := s.compactValueLog(ctx); err != nil {
		t.Fatal(err)
	}
	vlogAfter := vlogBytes(t, dir)
	t.Logf("value log %d → %d bytes", vlogBefore, vlogAfter)
	// Nearly all of it is superseded; files under half garbage and the file
	// being written are left alone, so the gain is not all of it.
	if vlogAfter > vlogBefore*2/3 {
		t.Fatalf("value log not compacted: %d → %d bytes", vlogBefore, vlogAfter)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	for i := range peers {
		p, err := s.GetPeer(ctx, fmt.Sprintf("peer-%d", i))
		if err != nil || p.Name != last {
			t.Fatalf("peer-%d after compaction: %v (name ends %q)", i, err, p.Name[max(0, len(p.Name)-10):])
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func vlogBytes(t *testing.T, dir string) int64 {
	t.Helper()
	_, n := filesSize(t, dir, func(name string) bool { return strings.HasSuffix(name, ".vlog") })
	return n
}

// filesSize counts the files in dir whose names match and sums their sizes.
func filesSize(t *testing.T, dir string, match func(name string) bool) (int, int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files int
	var n int64
	for _, e := range ents {
		if match(e.Name()) {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			files++
			n += fi.Size()
		}
	}
	return files, n
}

// TestRefusesOtherFormats: a store marked with a format other than
// formatVersion is refused with a *FormatError naming both, and left as it
// was: no marker rewritten, no log segment started.
func TestRefusesOtherFormats(t *testing.T) {
	for _, c := range []struct {
		format string
		older  bool
	}{{"cmbnode-store-1", true}, {"cmbnode-store-2", true}, {"cmbnode-store-9", false}, {"something else", false}} {
		t.Run(c.format, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, seg := range mustSegments(t, dir) {
				if err := os.Remove(filepath.Join(dir, segName(seg))); err != nil {
					t.Fatal(err)
				}
			}
			setFormat(t, dir, c.format)
			_, err = Open(dir, Options{})
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Found != c.format || fe.Want != formatVersion || fe.Older != c.older || fe.Dir != dir {
				t.Fatalf("opening a store of format %q: %v (%+v)", c.format, err, fe)
			}
			if msg := err.Error(); !strings.Contains(msg, c.format) || !strings.Contains(msg, formatVersion) {
				t.Fatalf("error does not name both formats: %v", err)
			}
			if errors.Is(err, ErrCorrupted) {
				t.Fatalf("another format reported as corruption: %v", err)
			}
			if got := readFormat(t, dir); got != c.format {
				t.Fatalf("format marker %q after the refusal, want %q", got, c.format)
			}
			if segs := mustSegments(t, dir); len(segs) != 0 {
				t.Fatalf("the refused store gained log segments %v", segs)
			}
		})
	}
}

func mustSegments(t *testing.T, dir string) []uint32 {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// TestDefaultOptions: Open gives the fields left zero their values in
// DefaultOptions, and the store's parent directory as Home.
func TestDefaultOptions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home", "store")
	s := openTest(t, dir)
	got, want := s.opts, DefaultOptions()
	if got.Now == nil || want.Now == nil {
		t.Fatal("no default clock")
	}
	got.Now, want.Now = nil, nil
	want.Home, want.hooks = filepath.Dir(dir), got.hooks
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("options after Open %+v, want %+v", got, want)
	}
}
