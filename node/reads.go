package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/store"
)

// The reads below serve adapters that keep views of their own (the CGP
// backend caches decoded records by their bytes): they hand out what the
// store holds without decoding it, and never surface a quarantined record.

// TextHit is one record matching a text search, ranked by relevance
// alone (no recency is blended in).
type TextHit struct {
	Key string
	// Relevance is in [0,1], on the fixed scale of Recall's (rank.go): the
	// record's own text relevance with its best lineage parent's and
	// child's.
	Relevance float64
	CreatedAt time.Time
}

// SearchText ranks held records against text by relevance, best first, at
// most limit of them, hiding records created after asOf (zero means now).
func (n *Node) SearchText(ctx context.Context, text string, limit int, asOf time.Time) ([]TextHit, error) {
	return n.searchText(ctx, text, nil, limit, asOf)
}

func (n *Node) searchText(ctx context.Context, text string, qvec []float32, limit int, asOf time.Time) ([]TextHit, error) {
	if asOf.IsZero() {
		asOf = n.now()
	}
	ranked, err := n.rankWith(ctx, text, qvec, max(limit, 1), asOf)
	if err != nil {
		return nil, err
	}
	out := make([]TextHit, 0, min(len(ranked), limit))
	for _, h := range ranked {
		if len(out) == limit {
			break
		}
		if n.st.IsQuarantined(h.key) {
			continue
		}
		out = append(out, TextHit{Key: h.key, Relevance: h.relevance, CreatedAt: time.UnixMilli(h.createdAt)})
	}
	return out, nil
}

// Newest is the creation time of the newest record held (zero if none).
func (n *Node) Newest(ctx context.Context) (time.Time, error) {
	kt, err := n.st.Recent(ctx, "", 1)
	if err != nil {
		return time.Time{}, fmt.Errorf("newest record: %w", err)
	}
	if len(kt) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(kt[0].CreatedAt), nil
}

// RawRecord is a held record's bytes exactly as received, undecoded, with
// the local facts about it.
type RawRecord struct {
	Raw      []byte
	StoredAt time.Time
	// Source is the peer nodeId it came from, or SourceLocal.
	Source string
}

// GetRaw returns one held record without decoding it. A record not held,
// or quarantined, is an error wrapping ErrNotFound (and ErrQuarantined).
func (n *Node) GetRaw(ctx context.Context, key string) (RawRecord, error) {
	if n.st.IsForgotten(key) {
		return RawRecord{}, forgottenErr(key)
	}
	r, err := n.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return RawRecord{}, fmt.Errorf("%w: no record %s", ErrNotFound, key)
	}
	if err != nil {
		return RawRecord{}, fmt.Errorf("read %s: %w", key, err)
	}
	if r.Meta.Quarantined {
		return RawRecord{}, fmt.Errorf("%w: record %s is %w", ErrNotFound, key, ErrQuarantined)
	}
	return RawRecord{Raw: r.Raw, StoredAt: r.Meta.StoredAt, Source: r.Meta.Source}, nil
}

// AuthorName is the name an author goes by here: this node's own name, or
// the one its handshake gave the roster; "" if none is known.
func (n *Node) AuthorName(ctx context.Context, author string) string {
	if strings.EqualFold(author, n.id.NodeID) {
		return n.id.Name
	}
	if p, err := n.st.GetPeer(ctx, strings.ToLower(author)); err == nil {
		return p.Name
	}
	return ""
}

// Children lists the held records naming key as a direct parent, leaving
// out hidden ones (quarantined, or forgotten and kept for lineage).
func (n *Node) Children(ctx context.Context, key string) ([]string, error) {
	c, err := n.st.Children(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("children of %s: %w", key, err)
	}
	return slices.DeleteFunc(c, n.st.IsHidden), nil
}

// Purge applies retention: records older than olderThan go, unless they
// are kept or a held record's lineage still references them.
func (n *Node) Purge(ctx context.Context, olderThan time.Duration) (store.PurgeResult, error) {
	res, err := n.st.Purge(ctx, olderThan)
	if err != nil {
		return res, fmt.Errorf("retention purge: %w", err)
	}
	return res, nil
}

// Count is the number of records held, quarantined ones included.
func (n *Node) Count() int { return n.st.Count() }
