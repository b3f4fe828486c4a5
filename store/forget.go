package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// Forgetting and assertions: two keyspaces beside the records.
//
// A tombstone (pTomb) says that this node forgot a key on purpose. It is
// local only: peers keep their copies, and nothing about the forgetting
// travels. Forget takes the record out of every surfacing index (the time,
// group and author orders and the text index) and out of what catch-up
// lists; the tombstone makes the key count as held for the node's Has, so
// it is never fetched again, and makes a put of it (a peer's gossip, an
// import, the same memory remembered again) a duplicate that stores
// nothing. What lineage needs is kept: a record that other held records
// name in their parents or ancestors stays, flagged Forgotten and hidden
// like a quarantined one, so their lineage still walks through it; a
// record nothing names is deleted with its index entries, as purge
// deletes. Either way its assertions (below) go.
//
// An assertion (pAssert) is another author's signed record of content
// this node holds under the same key: a cmb1- root key covers the fields,
// not the author, so a second author who writes the same text makes the
// same key. The record held stays the first author's; each other author's
// signed record is kept whole, under (key, author), so every author's
// assertion of that content can be shown and verified.

func tombKey(key string) []byte { return append([]byte{pTomb}, key...) }

func assertKey(key, author string) []byte { return edgeKey(pAssert, key, author) }

// ForgetResult says what Forget did.
type ForgetResult struct {
	// Already: the key was forgotten before; nothing changed.
	Already bool
	// Kept: held records' lineage names the record, so it is kept, hidden
	// (Meta.Forgotten), for that lineage; otherwise it was deleted.
	Kept bool
	// Assertions is how many other authors' assertions were dropped.
	Assertions int
}

// Forget forgets a held record on this node (see above): a tombstone is
// written, durably, in the same commit that hides or deletes the record.
// A key neither held nor forgotten is ErrNotFound.
func (s *Store) Forget(ctx context.Context, key string) (ForgetResult, error) {
	if err := checkName("key", key, false); err != nil {
		return ForgetResult{}, err
	}
	var res ForgetResult
	j := newJob(ctx, 1024, func(t *wtx) (func(), error) {
		res = ForgetResult{}
		if _, tomb, err := t.get(tombKey(key)); err != nil {
			return nil, err
		} else if tomb {
			res.Already = true
			return nil, nil
		}
		v, found, err := t.get(recKey(key))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		rec, err := decodeRecord(key, v, false)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupted, err)
		}
		t.set(tombKey(key), binary.AppendVarint(nil, s.opts.Now().UnixMilli()))
		for _, k := range t.keysWithPrefix(edgePrefix(pAssert, key)) {
			t.del(k)
			res.Assertions++
		}
		if t.hasPrefix(edgePrefix(pRefBy, key)) {
			v = slices.Clone(v)
			v[1] |= flForgotten
			t.set(recKey(key), v)
			res.Kept = true
		} else {
			t.del(recKey(key))
			for _, k := range indexKeys(&rec.Entry) {
				t.del(k)
			}
			t.count(-1)
		}
		// The key stays known to the writer, so a later put of it looks
		// its tombstone up instead of storing it as new.
		t.w.know(key)
		at, kept := s.orderAt(&rec), res.Kept
		// The in-memory set changes on the indexer, with the orders, so
		// Check (which holds the applies still and waits for the indexer)
		// always finds it equal to the tombstones.
		return func() {
			if !rec.Meta.Quarantined { // else in no order or index already
				s.order.remove(key, at, rec.Group, rec.CreatedBy)
				s.idx.remove([]string{key}, []docTerms{s.idx.analyze(rec.Texts)})
				s.lines.remove(key)
			}
			s.trust.mu.Lock()
			s.trust.forgotten[key] = struct{}{}
			if !kept {
				delete(s.trust.quarantined, key)
			}
			s.trust.mu.Unlock()
		}, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return ForgetResult{}, fmt.Errorf("forgetting %s: %w", key, err)
	}
	// Readers learn of it (IsForgotten) before Forget returns.
	if err := s.waitIndexed(ctx); err != nil {
		return res, fmt.Errorf("forgetting %s: %w", key, err)
	}
	return res, nil
}

// IsForgotten reports whether key was forgotten on this node (it has a
// tombstone), whether or not a hidden record is kept for lineage.
func (s *Store) IsForgotten(key string) bool { return s.trust.has(s.trust.forgotten, key) }

// IsHidden reports whether key names a record kept but not surfaced:
// quarantined, or forgotten and kept for lineage.
func (s *Store) IsHidden(key string) bool {
	s.trust.mu.RLock()
	defer s.trust.mu.RUnlock()
	_, q := s.trust.quarantined[key]
	_, f := s.trust.forgotten[key]
	return q || f
}

// loadTombstones reads the forgotten keys into memory and hands them to
// the writer as known (Open).
func (s *Store) loadTombstones() error {
	return s.scan(context.Background(), badger.IteratorOptions{Prefix: []byte{pTomb}}, func(item *badger.Item) error {
		k := string(item.Key()[1:])
		s.trust.forgotten[k] = struct{}{}
		s.loadedKeys[k] = struct{}{}
		return nil
	})
}

// keysWithPrefix lists the live keys starting with prefix, in key order,
// as the job sees them (badger plus batches not yet in it).
func (t *wtx) keysWithPrefix(prefix []byte) [][]byte {
	set := map[string]bool{}
	it := t.w.view().NewIterator(badger.IteratorOptions{Prefix: prefix})
	for it.Rewind(); it.Valid(); it.Next() {
		set[string(it.Item().Key())] = true
	}
	it.Close()
	for k, e := range t.w.ov {
		if strings.HasPrefix(k, string(prefix)) {
			set[k] = !e.del
		}
	}
	var out [][]byte
	for k, live := range set {
		if live {
			out = append(out, []byte(k))
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out
}

// Assertion is another author's signed record of a held key's content.
type Assertion struct {
	Author string
	// Raw is that author's record exactly as it was verified.
	Raw []byte
}

// PutAssertion keeps author's signed record raw of the content held under
// key, when the record held is another author's. It returns whether it
// stored anything: not when the key is not held, or forgotten, or held as
// author's own record, or author's assertion is kept already. The caller
// has verified raw (its address is key, author signed it).
func (s *Store) PutAssertion(ctx context.Context, key, author string, raw []byte) (bool, error) {
	if err := checkName("key", key, false); err != nil {
		return false, err
	}
	if err := checkName("author", author, false); err != nil {
		return false, err
	}
	if len(raw) == 0 {
		return false, fmt.Errorf("%w: empty assertion of %s by %s", ErrInvalid, key, author)
	}
	raw = slices.Clone(raw)
	stored := false
	j := newJob(ctx, len(raw)+len(key)+len(author)+32, func(t *wtx) (func(), error) {
		stored = false
		v, found, err := t.get(recKey(key))
		if err != nil || !found {
			return nil, err
		}
		rec, err := decodeRecord(key, v, false)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupted, err)
		}
		if rec.CreatedBy == author || rec.Meta.Forgotten {
			return nil, nil
		}
		if _, had, err := t.get(assertKey(key, author)); err != nil || had {
			return nil, err
		}
		t.set(assertKey(key, author), raw)
		stored = true
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return false, fmt.Errorf("keeping %s's assertion of %s: %w", author, key, err)
	}
	return stored, nil
}

// Assertions lists the other authors' assertions kept for key, by author.
func (s *Store) Assertions(ctx context.Context, key string) ([]Assertion, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	prefix := edgePrefix(pAssert, key)
	var out []Assertion
	err := s.scan(ctx, badger.IteratorOptions{PrefetchValues: true, Prefix: prefix}, func(item *badger.Item) error {
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		out = append(out, Assertion{Author: string(item.Key()[len(prefix):]), Raw: v})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing assertions of %s: %w", key, err)
	}
	return out, nil
}
