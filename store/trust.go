package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// trustState is what the store keeps in memory about who may be believed:
// the records it quarantined and the authors known to sign. Both sets are
// loaded at Open and change only through the writer.
type trustState struct {
	mu          sync.RWMutex
	quarantined map[string]struct{} // changed by quarantine and delete
	// everQuarantined is set, under mu, as quarantine adds the first key
	// (and never cleared): while it is false, quarantined is empty, and
	// IsQuarantined answers without the lock.
	everQuarantined atomic.Bool
	signers         map[string]struct{}
	// forgotten holds every tombstoned key (Forget), held hidden or not.
	forgotten map[string]struct{}
}

// quarantine adds key to the quarantined set; called with mu held (or
// alone, at Open).
func (t *trustState) quarantine(key string) {
	t.quarantined[key] = struct{}{}
	t.everQuarantined.Store(true)
}

func newTrustState() *trustState {
	return &trustState{quarantined: map[string]struct{}{}, signers: map[string]struct{}{}, forgotten: map[string]struct{}{}}
}

func signerKey(author string) []byte { return append([]byte{pSigner}, author...) }

// Quarantine keeps records but stops surfacing them: they leave the time,
// group and author orders and the text index, so no listing, search,
// catch-up digest or purge finds them, while Has and Get still do (so the
// same record is not fetched and accepted again, and Get reports
// Meta.Quarantined). It returns how many records were newly quarantined.
func (s *Store) Quarantine(ctx context.Context, keys []string) (int, error) {
	return s.setQuarantined(ctx, keys, true)
}

// setQuarantined sets or clears the quarantine flag of the held records
// among keys, moving each out of or back into the orders and the text
// index, and returns how many changed.
func (s *Store) setQuarantined(ctx context.Context, keys []string, on bool) (int, error) {
	var jobs []*job
	marked := make([]bool, len(keys))
	for i, key := range keys {
		jobs = append(jobs, newJob(ctx, 256, func(t *wtx) (func(), error) {
			v, found, err := t.get(recKey(key))
			if err != nil || !found {
				return nil, err
			}
			rec, err := decodeRecord(key, v, false)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrCorrupted, err)
			}
			if rec.Meta.Quarantined == on {
				return nil, nil
			}
			v = slices.Clone(v)
			if on {
				v[1] |= flQuarantined
			} else {
				v[1] &^= flQuarantined
			}
			t.set(recKey(key), v)
			marked[i] = true
			rec.Meta.Quarantined = on
			at := s.orderAt(&rec)
			return func() {
				if on {
					s.order.remove(key, at, rec.Group, rec.CreatedBy)
					s.idx.remove([]string{key}, []docTerms{s.idx.analyze(rec.Texts)})
					s.lines.remove(key)
				} else {
					s.order.add(key, at, rec.Group, rec.CreatedBy)
					s.idx.addTexts(key, at, rec.Group, rec.Texts)
					s.lines.add(key, at, rec.Parents)
				}
			}, nil
		}))
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	errs, err := s.submit(ctx, jobs)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		return 0, fmt.Errorf("setting quarantined=%t on %d records: %w", on, len(keys), err)
	}
	n := 0
	s.trust.mu.Lock()
	for i, m := range marked {
		if m {
			if on {
				s.trust.quarantine(keys[i])
			} else {
				delete(s.trust.quarantined, keys[i])
			}
			n++
		}
	}
	s.trust.mu.Unlock()
	return n, nil
}

// Quarantined lists the quarantined records' keys, sorted.
func (s *Store) Quarantined() []string {
	s.trust.mu.RLock()
	out := make([]string, 0, len(s.trust.quarantined))
	for k := range s.trust.quarantined {
		out = append(out, k)
	}
	s.trust.mu.RUnlock()
	slices.Sort(out)
	return out
}

// IsQuarantined reports whether key names a quarantined record.
func (s *Store) IsQuarantined(key string) bool {
	return s.trust.everQuarantined.Load() && s.trust.has(s.trust.quarantined, key)
}

func (t *trustState) has(set map[string]struct{}, k string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := set[k]
	return ok
}

// MarkSigned records durably that author has had a signed record admitted:
// from then on unsigned records claiming it are refused (MMP §18.3.1's
// downgrade rule). Only the first call for an author writes.
func (s *Store) MarkSigned(ctx context.Context, author string) error {
	if err := checkName("author", author, false); err != nil {
		return err
	}
	if s.HasSigned(author) {
		return nil
	}
	j := newJob(ctx, 64+len(author), func(t *wtx) (func(), error) {
		t.set(signerKey(author), []byte{1})
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return fmt.Errorf("recording that %s signs: %w", author, err)
	}
	s.trust.mu.Lock()
	s.trust.signers[author] = struct{}{}
	s.trust.mu.Unlock()
	return nil
}

// HasSigned reports whether MarkSigned was ever called for author.
func (s *Store) HasSigned(author string) bool { return s.trust.has(s.trust.signers, author) }

// loadSigners reads the signer set into memory (Open).
func (s *Store) loadSigners() error {
	return s.scan(context.Background(), badger.IteratorOptions{Prefix: []byte{pSigner}}, func(item *badger.Item) error {
		s.trust.signers[string(item.Key()[1:])] = struct{}{}
		return nil
	})
}

// Unquarantine surfaces quarantined records again (the operator chose
// their author's key): they return to the time, group and author orders
// and the text index. It returns how many were quarantined before.
func (s *Store) Unquarantine(ctx context.Context, keys []string) (int, error) {
	return s.setQuarantined(ctx, keys, false)
}
