package store

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// KeysWithPrefix lists stored record keys that begin with prefix, in key
// order, at most limit of them (0: no limit) among those keep accepts (nil
// keeps all). It reads keys only, never values: the cost is the matches
// seen, not the records held.
func (s *Store) KeysWithPrefix(ctx context.Context, prefix string, limit int, keep func(key string) bool) ([]string, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	p := recKey(prefix)
	var out []string
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := string(it.Item().Key()[1:])
			if keep != nil && !keep(k) {
				continue
			}
			out = append(out, k)
			if limit > 0 && len(out) >= limit {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing keys with prefix %q: %w", prefix, err)
	}
	return out, nil
}
