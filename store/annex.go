package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// An annex is a fact the node layer derives from a record and wants kept
// beside it (its SVAF verdict, its dense vectors), in a namespace the node
// names. The store does not interpret annexes: they take no part in the
// record's bytes, its indexes, the text index, Check or catch-up, so adding
// or changing one can never make a record disagree with its indexes.
// Purge does not remove them; the node drops annexes whose record is gone
// (Has is false) when it loads them. Annexes live under pAnnex.

// MaxAnnexBytes bounds one annex value.
const MaxAnnexBytes = 1 << 20

func annexKey(ns, key string) []byte {
	b := make([]byte, 0, 2+len(ns)+len(key))
	b = append(b, pAnnex)
	b = append(b, ns...)
	b = append(b, 0)
	return append(b, key...)
}

func checkAnnex(ns, key string, val []byte) error {
	if err := checkName("annex namespace", ns, false); err != nil {
		return err
	}
	if err := checkName("key", key, false); err != nil {
		return err
	}
	if len(val) > MaxAnnexBytes {
		return fmt.Errorf("annex %s of %s is %d bytes, over %d", ns, key, len(val), MaxAnnexBytes)
	}
	return nil
}

// Annex is one annex to write: Value nil deletes it.
type Annex struct {
	Key   string
	Value []byte
}

// PutAnnexes writes (or, for a nil Value, deletes) annexes of namespace ns
// durably, in one commit where they fit one.
func (s *Store) PutAnnexes(ctx context.Context, ns string, as []Annex) error {
	jobs := make([]*job, 0, len(as))
	for _, a := range as {
		if err := checkAnnex(ns, a.Key, a.Value); err != nil {
			return err
		}
		k, v := annexKey(ns, a.Key), bytes.Clone(a.Value)
		jobs = append(jobs, newJob(ctx, 64+len(k)+len(v), func(t *wtx) (func(), error) {
			if v == nil {
				t.del(k)
			} else {
				t.set(k, v)
			}
			return nil, nil
		}))
	}
	if len(jobs) == 0 {
		return nil
	}
	errs, err := s.submit(ctx, jobs)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		return fmt.Errorf("writing %d %s annexes: %w", len(as), ns, err)
	}
	return nil
}

// GetAnnex returns key's annex in namespace ns; ok is false if none.
func (s *Store) GetAnnex(ctx context.Context, ns, key string) (val []byte, ok bool, err error) {
	if err := s.readable(ctx); err != nil {
		return nil, false, err
	}
	err = s.view(func(txn *badger.Txn) error {
		it, err := txn.Get(annexKey(ns, key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		val, err = it.ValueCopy(nil)
		ok = err == nil
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading %s annex of %s: %w", ns, key, err)
	}
	return val, ok, nil
}

// ScanAnnexes calls fn with every annex of namespace ns, in key order. The
// value is valid only during the call.
func (s *Store) ScanAnnexes(ctx context.Context, ns string, fn func(key string, val []byte) error) error {
	if err := s.readable(ctx); err != nil {
		return err
	}
	prefix := annexKey(ns, "")
	err := s.scan(ctx, badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 256, Prefix: prefix}, func(item *badger.Item) error {
		key := string(item.Key()[len(prefix):])
		return item.Value(func(v []byte) error { return fn(key, v) })
	})
	if err != nil {
		return fmt.Errorf("scanning %s annexes: %w", ns, err)
	}
	return nil
}

// ItemAnnex is an annex to write with a new record (Item.Annexes): in the
// record's own commit, so the record is never durable without it. A
// duplicate's annexes are not written. PutMany keeps Value without
// copying it: the caller must not change it once it is passed, even after
// PutMany returns (a cancelled call's record may still be committed).
type ItemAnnex struct {
	NS    string
	Value []byte
}

func checkItemAnnexes(key string, as []ItemAnnex) error {
	for _, a := range as {
		if err := checkAnnex(a.NS, key, a.Value); err != nil {
			return err
		}
	}
	return nil
}

// setAnnexes writes a new record's annexes inside its put job. The
// values are the caller's own, not copies: PutMany takes ownership of
// them (Item.Annexes), and the log, the overlay and badger only read them.
func setAnnexes(t *wtx, key string, as []ItemAnnex) {
	for _, a := range as {
		if a.Value != nil {
			t.set(annexKey(a.NS, key), a.Value)
		}
	}
}
