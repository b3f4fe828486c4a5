package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/btree"
)

// CheckError lists every disagreement Check found.
type CheckError struct {
	Problems []string
}

func (e *CheckError) Error() string {
	const show = 20
	var b strings.Builder
	fmt.Fprintf(&b, "store check found %d problem(s)", len(e.Problems))
	for i, p := range e.Problems {
		if i == show {
			fmt.Fprintf(&b, "; … and %d more", len(e.Problems)-show)
			break
		}
		b.WriteString("; ")
		b.WriteString(p)
	}
	return b.String()
}

// Is lets errors.Is(err, ErrCorrupted) match a failed check.
func (e *CheckError) Is(target error) bool { return target == ErrCorrupted }

type recSummary struct {
	at     int64 // Store.orderAt
	group  string
	author string
	// quarantined and forgotten records are in no order and not in the
	// text index.
	quarantined bool
	forgotten   bool
	parents     map[string]struct{}
	refs        map[string]struct{}
}

// Check proves that every index agrees with the records: each record has
// exactly its time, group, author, child and referenced-by entries, no index
// entry points at a missing or different record, the count is right, and
// the in-memory text index equals one rebuilt from the stored texts. Writes
// wait while it runs. It returns a *CheckError listing the disagreements.
func (s *Store) Check(ctx context.Context) error {
	// Everything acknowledged before the call is checked.
	if err := s.readable(ctx); err != nil {
		return err
	}
	if err := s.waitTextsLoaded(ctx); err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	// The indexer needs no lock: with badger held still it catches up.
	if err := s.indexed.wait(ctx, s.appliedSeq.Load()); err != nil {
		return err
	}

	var problems []string
	add := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	recs := map[string]*recSummary{}
	rebuilt := newTextIndex(nil)

	// Every read below sees one transaction: the records and their
	// indexes as of one moment.
	err := s.view(func(txn *badger.Txn) error {
		err := scanTxn(ctx, txn, badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: []byte{pRec}}, func(item *badger.Item) error {
			key := string(item.Key()[1:])
			var rec Record
			if err := item.Value(func(v []byte) error {
				v, err := s.readPointer(v)
				if err != nil {
					return err
				}
				var derr error
				rec, derr = decodeRecord(key, v, false)
				return derr
			}); err != nil {
				add("record %s does not decode: %v", key, err)
				return nil
			}
			if err := rec.Validate(); err != nil {
				add("record %s is invalid: %v", key, err)
			}
			at := s.orderAt(&rec)
			sum := &recSummary{at: at, group: rec.Group, author: rec.CreatedBy,
				quarantined: rec.Meta.Quarantined, forgotten: rec.Meta.Forgotten, parents: set(rec.Parents), refs: set(refTargets(&rec.Entry))}
			recs[key] = sum
			if !sum.quarantined && !sum.forgotten {
				rebuilt.addLocked(key, at, rec.Group, s.idx.analyze(rec.Texts))
			}
			for _, k := range indexKeys(&rec.Entry) {
				if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
					add("record %s lacks %s", key, describeKey(k))
				} else if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		// The checks of the other keyspaces are quick: they do not watch ctx.
		bg := context.Background()

		// Every index entry belongs to a record that agrees with it.
		for _, p := range []byte{pChild, pRefBy} {
			scanTxn(bg, txn, badger.IteratorOptions{Prefix: []byte{p}}, func(item *badger.Item) error {
				if msg := checkIndexKey(item.Key(), recs); msg != "" {
					add("%s: %s", describeKey(item.Key()), msg)
				}
				return nil
			})
		}

		// Tombstones: a record kept under one is hidden (Forgotten), and
		// the in-memory set agrees with them; a hidden record has one.
		tombs := map[string]struct{}{}
		scanTxn(bg, txn, badger.IteratorOptions{Prefix: []byte{pTomb}}, func(item *badger.Item) error {
			k := string(item.Key()[1:])
			tombs[k] = struct{}{}
			if r := recs[k]; r != nil && !r.forgotten {
				add("record %s is forgotten (tombstone) but not hidden", k)
			}
			return nil
		})
		for k, r := range recs {
			if _, ok := tombs[k]; r.forgotten && !ok {
				add("record %s is hidden as forgotten but has no tombstone", k)
			}
		}
		s.trust.mu.RLock()
		diffSets(s.trust.forgotten, tombs, "forgotten key", add)
		s.trust.mu.RUnlock()

		// Assertions: each names a held record of another author.
		scanTxn(bg, txn, badger.IteratorOptions{Prefix: []byte{pAssert}}, func(item *badger.Item) error {
			body := item.Key()[1:]
			i := bytes.IndexByte(body, 0)
			if i < 0 {
				add("assertion entry %q is malformed", body)
				return nil
			}
			key, author := string(body[:i]), string(body[i+1:])
			r := recs[key]
			switch {
			case r == nil:
				add("assertion of %s by %s names a missing record", key, author)
			case r.author == author:
				add("assertion of %s by %s repeats the record's own author", key, author)
			case r.forgotten:
				add("assertion of %s by %s outlived its forgotten record", key, author)
			case item.ValueSize() == 0:
				add("assertion of %s by %s is empty", key, author)
			}
			return nil
		})

		return scanTxn(bg, txn, badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{pPeer}}, func(item *badger.Item) error {
			var peer Peer
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &peer) }); err != nil {
				add("peer %s does not decode: %v", item.Key()[1:], err)
			} else if peer.NodeID != string(item.Key()[1:]) {
				add("peer entry %s holds nodeId %s", item.Key()[1:], peer.NodeID)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("checking store: %w", err)
	}

	if n := s.count.Load(); n != int64(len(recs)) {
		add("count is %d but %d records are stored", n, len(recs))
	}
	checkOrder(s.order, recs, add)
	checkLines(s.lines, recs, add)
	s.idx.mu.Lock()
	liveDocs, livePost := s.idx.snapshot()
	s.idx.mu.Unlock()
	wantDocs, wantPost := rebuilt.snapshot()
	diffMaps(liveDocs, wantDocs, "text index document", add)
	for t, want := range wantPost {
		got := livePost[t]
		for p := range want {
			if _, ok := got[p]; !ok {
				add("text index term %q lacks posting %s", t, p)
			}
		}
		for p := range got {
			if _, ok := want[p]; !ok {
				add("text index term %q has stray posting %s", t, p)
			}
		}
	}
	for t := range livePost {
		if _, ok := wantPost[t]; !ok {
			add("text index has stray term %q", t)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return &CheckError{Problems: problems}
	}
	return nil
}

func set(l []string) map[string]struct{} {
	m := make(map[string]struct{}, len(l))
	for _, s := range l {
		m[s] = struct{}{}
	}
	return m
}

func checkIndexKey(k []byte, recs map[string]*recSummary) string {
	body := k[1:]
	switch k[0] {
	case pChild, pRefBy:
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return "malformed"
		}
		from, to := string(body[:i]), string(body[i+1:])
		r := recs[to]
		if r == nil {
			return "names a missing record"
		}
		m := r.parents
		if k[0] == pRefBy {
			m = r.refs
		}
		if _, ok := m[from]; !ok {
			return fmt.Sprintf("but %s does not list %s in its lineage", to, from)
		}
	}
	return ""
}

func describeKey(k []byte) string {
	name := map[byte]string{pChild: "child", pRefBy: "referenced-by"}[k[0]]
	body := slices.Clone(k[1:])
	for i, c := range body {
		if c == 0 {
			body[i] = '/'
		}
	}
	return fmt.Sprintf("%s index entry %q", name, body)
}

func diffSets(got, want map[string]struct{}, what string, add func(string, ...any)) {
	for k := range want {
		if _, ok := got[k]; !ok {
			add("%s %s missing in memory", what, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			add("%s %s is stray in memory", what, k)
		}
	}
}

func diffMaps(got, want map[string]string, what string, add func(string, ...any)) {
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			add("%s %s missing", what, k)
		case g != w:
			add("%s %s is %s, want %s", what, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			add("%s %s is stray", what, k)
		}
	}
}

// checkLines compares the in-memory lineage with the records: every
// surfaced record with its parents, each listed as a child of each parent.
func checkLines(l *lineIndex, recs map[string]*recSummary, add func(string, ...any)) {
	want := newLineIndex()
	for k, r := range recs {
		if !r.quarantined && !r.forgotten {
			want.add(k, r.at, slices.Sorted(maps.Keys(r.parents)))
		}
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for k, w := range want.nodes {
		g, ok := l.nodes[k]
		switch {
		case !ok:
			add("lineage of %s missing", k)
		case g.at != w.at || !maps.Equal(set(g.parents), set(w.parents)):
			add("lineage of %s is at %d with parents %v, want at %d with %v", k, g.at, g.parents, w.at, w.parents)
		}
	}
	for k := range l.nodes {
		if _, ok := want.nodes[k]; !ok {
			add("lineage of %s is stray", k)
		}
	}
	for p, w := range want.children {
		if g := l.children[p]; !maps.Equal(set(g), set(w)) {
			add("children of %s are %v, want %v", p, g, w)
		}
	}
	for p, g := range l.children {
		if _, ok := want.children[p]; !ok {
			add("children of %s are %v, want none", p, g)
		}
	}
}

// checkOrder compares the in-memory orders with the records.
func checkOrder(o *orderIndex, recs map[string]*recSummary, add func(string, ...any)) {
	want := newOrderIndex()
	for k, r := range recs {
		if !r.quarantined && !r.forgotten {
			want.add(k, r.at, r.group, r.author)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	type tree = *btree.BTreeG[KeyTime]
	compare := func(what string, got, want tree) {
		list := func(t tree) []KeyTime {
			var l []KeyTime
			if t != nil {
				t.Ascend(func(kt KeyTime) bool { l = append(l, kt); return true })
			}
			return l
		}
		g, w := list(got), list(want)
		if !slices.Equal(g, w) {
			add("%s order holds %d entries, want %d (first difference near %v)", what, len(g), len(w), firstDiff(g, w))
		}
	}
	compare("time", o.all, want.all)
	for _, m := range []struct {
		what      string
		got, want map[string]*btree.BTreeG[KeyTime]
	}{{"group", o.byGroup, want.byGroup}, {"author", o.byAuthor, want.byAuthor}} {
		for name, w := range m.want {
			compare(fmt.Sprintf("%s %q", m.what, name), m.got[name], w)
		}
		for name, g := range m.got {
			if _, ok := m.want[name]; !ok {
				compare(fmt.Sprintf("%s %q", m.what, name), g, nil)
			}
		}
	}
}

func firstDiff(a, b []KeyTime) any {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i]
		}
	}
	if len(a) > len(b) {
		return a[len(b)]
	}
	if len(b) > len(a) {
		return b[len(a)]
	}
	return nil
}
