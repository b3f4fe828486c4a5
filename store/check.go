package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
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
	createdAt int64
	group     string
	author    string
	parents   map[string]struct{}
	refs      map[string]struct{}
}

// Check proves that every index agrees with the records: each record has
// exactly its time, group, author, child and referenced-by entries, no index
// entry points at a missing or different record, the count is right, and
// the in-memory text index equals one rebuilt from the stored texts. Writes
// wait while it runs. It returns a *CheckError listing the disagreements.
func (s *Store) Check(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
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
	rebuilt := newTextIndex()

	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: []byte{pRec}})
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				it.Close()
				return err
			}
			item := it.Item()
			key := string(item.Key()[1:])
			var rec Record
			if err := item.Value(func(v []byte) error {
				var derr error
				rec, derr = decodeRecord(key, v, false)
				return derr
			}); err != nil {
				add("record %s does not decode: %v", key, err)
				continue
			}
			if err := rec.Validate(); err != nil {
				add("record %s is invalid: %v", key, err)
			}
			sum := &recSummary{createdAt: rec.CreatedAt, group: rec.Group, author: rec.CreatedBy,
				parents: set(rec.Parents), refs: set(refTargets(&rec.Entry))}
			recs[key] = sum
			rebuilt.addLocked(key, rec.CreatedAt, rec.Group, analyze(rec.Texts))
			for _, k := range indexKeys(&rec.Entry) {
				if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
					add("record %s lacks %s", key, describeKey(k))
				} else if err != nil {
					it.Close()
					return err
				}
			}
		}
		it.Close()

		// Every index entry belongs to a record that agrees with it.
		for _, p := range []byte{pTime, pGroup, pAuthor, pChild, pRefBy} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{p}})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()
				if msg := checkIndexKey(k, recs); msg != "" {
					add("%s: %s", describeKey(k), msg)
				}
			}
			it.Close()
		}

		it = txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{pPeer}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var peer Peer
			item := it.Item()
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &peer) }); err != nil {
				add("peer %s does not decode: %v", item.Key()[1:], err)
			} else if peer.NodeID != string(item.Key()[1:]) {
				add("peer entry %s holds nodeId %s", item.Key()[1:], peer.NodeID)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checking store: %w", err)
	}

	if n := s.count.Load(); n != int64(len(recs)) {
		add("count is %d but %d records are stored", n, len(recs))
	}
	s.idx.mu.RLock()
	liveDocs, livePost := s.idx.snapshot()
	s.idx.mu.RUnlock()
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
	case pTime:
		if len(body) < 8 {
			return "malformed"
		}
		ts, key := readTS(body), string(body[8:])
		r := recs[key]
		if r == nil {
			return "points at a missing record"
		}
		if r.createdAt != ts {
			return fmt.Sprintf("time %d but the record says %d", ts, r.createdAt)
		}
	case pGroup, pAuthor:
		i := bytes.IndexByte(body, 0)
		if i < 0 || len(body) < i+9 {
			return "malformed"
		}
		name, ts, key := string(body[:i]), readTS(body[i+1:]), string(body[i+9:])
		r := recs[key]
		if r == nil {
			return "points at a missing record"
		}
		want := r.group
		if k[0] == pAuthor {
			want = r.author
		}
		if r.createdAt != ts || want != name {
			return fmt.Sprintf("(%q, %d) but the record says (%q, %d)", name, ts, want, r.createdAt)
		}
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
	name := map[byte]string{pTime: "time", pGroup: "group", pAuthor: "author", pChild: "child", pRefBy: "referenced-by"}[k[0]]
	body := slices.Clone(k[1:])
	for i, c := range body {
		if c == 0 {
			body[i] = '/'
		}
	}
	return fmt.Sprintf("%s index entry %q", name, body)
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
