package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/cmbnode/cmbnode/store"
)

// ErrForgotten is wrapped (with ErrNotFound) when a key was forgotten on
// this node (Forget).
var ErrForgotten = errors.New("forgotten on this node")

// ForgetResult says what Forget did.
type ForgetResult struct {
	Key string `json:"key"`
	// Already: the key was forgotten before.
	Already bool `json:"already"`
	// KeptForLineage: held records' lineage names it, so it is kept,
	// hidden and never served, for their lineage to walk through.
	KeptForLineage bool `json:"keptForLineage"`
}

// Forget removes a memory from this node, and from this node only: it is
// no longer recalled, listed, read, served to peers or offered in
// catch-up, and its key counts as held (Has), so it is never fetched or
// accepted again, whoever sends it. Peers keep their copies; nothing of
// the forgetting travels. ref is a key or a unique key prefix. The
// tombstone is durable before Forget returns (store.Forget).
func (n *Node) Forget(ctx context.Context, ref string) (ForgetResult, error) {
	key, err := n.ResolveKey(ctx, ref)
	if err != nil {
		return ForgetResult{}, err
	}
	res, err := n.st.Forget(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return ForgetResult{}, fmt.Errorf("%w: no record %s", ErrNotFound, key)
	}
	if err != nil {
		return ForgetResult{}, fmt.Errorf("forget %s: %w", key, err)
	}
	if !res.Already {
		n.log.Info("forgot a record on this node", "key", key, "keptForLineage", res.Kept)
	}
	return ForgetResult{Key: key, Already: res.Already, KeptForLineage: res.Kept}, nil
}

// forgottenErr is the not-found answer for a forgotten key.
func forgottenErr(key string) error {
	return fmt.Errorf("%w: record %s was %w (forget is local: peers keep theirs)", ErrNotFound, key, ErrForgotten)
}
