package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// Same content, several authors. A cmb1- root key covers the seven
// fields and not the author (cmb.AddressV1; a remix's key includes its
// author, so only roots, and legacy cmb- keys, collide). The record held
// under a key is the first author's; when another author's valid record
// of the same content arrives (remembered here, published by a local
// agent, received from a peer or imported), its whole signed record is
// kept as an assertion (store.PutAssertion), so get can show, and anyone
// verify, every author who asserted it. assertOther is that rule, used on
// every path a record enters by.

// Assertion is another author's signed record of a held record's content.
type Assertion struct {
	CreatedBy string `json:"createdBy"`
	CreatedAt int64  `json:"createdAt"`
	// CMB is that author's record exactly as verified.
	CMB []byte `json:"-"`
}

// assertOther keeps rec as an assertion when the record held under its key
// (held) is another author's. It reports whether held is rec's author's
// own, and whether an assertion was newly kept. rec must have passed the
// node's checks (it is signed by its author, or built here).
func (n *Node) assertOther(ctx context.Context, rec *cmb.Record, held store.Record) (sameAuthor, asserted bool, err error) {
	if strings.EqualFold(held.CreatedBy, rec.CreatedBy) {
		return true, false, nil
	}
	if held.Meta.Forgotten || held.Meta.Quarantined {
		return false, false, nil
	}
	asserted, err = n.st.PutAssertion(ctx, rec.Key, rec.CreatedBy, rec.Encode())
	if err != nil {
		return false, false, err
	}
	if asserted {
		n.Counters.Assertions.Add(1)
	}
	return false, asserted, nil
}

// assertions lists the other authors' assertions of key, oldest first; one
// that no longer decodes is left out.
func (n *Node) assertions(ctx context.Context, key string) ([]Assertion, error) {
	as, err := n.st.Assertions(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("assertions of %s: %w", key, err)
	}
	out := make([]Assertion, 0, len(as))
	for _, a := range as {
		rec, err := cmb.Decode(a.Raw)
		if err != nil {
			n.log.Warn("an assertion does not decode", "key", key, "author", a.Author, "err", err)
			continue
		}
		out = append(out, Assertion{CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt, CMB: a.Raw})
	}
	slices.SortFunc(out, func(a, b Assertion) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.CreatedBy, b.CreatedBy))
	})
	return out, nil
}

// heldFor returns the record held under key for a duplicate check: ok is
// false when none is (forgotten and deleted).
func (n *Node) heldFor(ctx context.Context, key string) (store.Record, bool, error) {
	r, err := n.st.GetLineage(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return store.Record{}, false, nil
	}
	return r, err == nil, err
}
