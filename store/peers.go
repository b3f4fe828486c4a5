package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Peer is one roster entry. Keys are pinned on first sight (TOFU).
type Peer struct {
	NodeID    string    `json:"nodeId"`
	Ed25519   []byte    `json:"ed25519,omitempty"`
	X25519    []byte    `json:"x25519,omitempty"`
	Name      string    `json:"name,omitempty"`
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
}

// ErrKeyConflict is matched (errors.Is) by every *KeyConflictError.
var ErrKeyConflict = errors.New("peer key conflict")

// KeyConflictError says which pinned key a peer tried to replace.
type KeyConflictError struct {
	NodeID    string
	Kind      string // "Ed25519" or "X25519"
	Pinned    []byte
	Offered   []byte
	FirstSeen time.Time
}

func (e *KeyConflictError) Error() string {
	enc := base64.RawURLEncoding
	return fmt.Sprintf("peer key conflict: node %s has %s key %s pinned since %s; refusing %s (a different key for the same nodeId is an impersonation attempt or a reinstalled node; remove the peer from the roster to accept it)",
		e.NodeID, e.Kind, enc.EncodeToString(e.Pinned), e.FirstSeen.UTC().Format(time.RFC3339), enc.EncodeToString(e.Offered))
}

// Is makes errors.Is(err, ErrKeyConflict) work.
func (e *KeyConflictError) Is(target error) bool { return target == ErrKeyConflict }

func peerKey(id string) []byte { return append([]byte{pPeer}, id...) }

// PutPeer records a sighting of a peer. A new peer is pinned with the keys it
// presents; a known one may fill in a key it never presented, update its
// name and last-seen, but never change a pinned key (*KeyConflictError).
// It returns the roster entry as stored.
func (s *Store) PutPeer(ctx context.Context, p Peer) (Peer, error) {
	if err := checkName("nodeId", p.NodeID, false); err != nil {
		return Peer{}, err
	}
	now := s.opts.Now()
	if p.LastSeen.IsZero() {
		p.LastSeen = now
	}
	var out Peer
	j := newJob(ctx, 512, func(t *wtx) (func(), error) {
		cur, found, err := readPeerTx(t, p.NodeID)
		if err != nil {
			return nil, err
		}
		if !found {
			out = p
			if out.FirstSeen.IsZero() {
				out.FirstSeen = p.LastSeen
			}
		} else {
			out = cur
			for _, k := range []struct {
				kind           string
				pinned, offers *[]byte
			}{{"Ed25519", &out.Ed25519, &p.Ed25519}, {"X25519", &out.X25519, &p.X25519}} {
				switch {
				case len(*k.offers) == 0:
				case len(*k.pinned) == 0:
					*k.pinned = *k.offers
				case !bytes.Equal(*k.pinned, *k.offers):
					return nil, &KeyConflictError{NodeID: p.NodeID, Kind: k.kind, Pinned: *k.pinned, Offered: *k.offers, FirstSeen: cur.FirstSeen}
				}
			}
			if p.Name != "" {
				out.Name = p.Name
			}
			if p.LastSeen.After(out.LastSeen) {
				out.LastSeen = p.LastSeen
			}
		}
		v, err := json.Marshal(out)
		if err != nil {
			return nil, err
		}
		t.set(peerKey(p.NodeID), v)
		return nil, nil
	})
	errs, err := s.submit(ctx, []*job{j})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return Peer{}, fmt.Errorf("recording peer %s: %w", p.NodeID, err)
	}
	return out, nil
}

func readPeer(txn *badger.Txn, id string) (Peer, bool, error) {
	it, err := txn.Get(peerKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Peer{}, false, nil
	}
	if err != nil {
		return Peer{}, false, err
	}
	var p Peer
	err = it.Value(func(v []byte) error { return json.Unmarshal(v, &p) })
	if err != nil {
		return Peer{}, false, fmt.Errorf("%w: peer %s: %v", ErrCorrupted, id, err)
	}
	return p, true, nil
}

func readPeerTx(t *wtx, id string) (Peer, bool, error) {
	v, found, err := t.get(peerKey(id))
	if err != nil || !found {
		return Peer{}, false, err
	}
	var p Peer
	if err := json.Unmarshal(v, &p); err != nil {
		return Peer{}, false, fmt.Errorf("%w: peer %s: %v", ErrCorrupted, id, err)
	}
	return p, true, nil
}

// GetPeer returns the roster entry for nodeID, or ErrNotFound.
func (s *Store) GetPeer(ctx context.Context, nodeID string) (Peer, error) {
	if s.closed.Load() {
		return Peer{}, ErrClosed
	}
	if err := s.waitApplied(ctx); err != nil {
		return Peer{}, err
	}
	var p Peer
	var found bool
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		p, found, err = readPeer(txn, nodeID)
		return err
	})
	if err != nil {
		return Peer{}, fmt.Errorf("reading peer %s: %w", nodeID, err)
	}
	if !found {
		return Peer{}, fmt.Errorf("%w: peer %s", ErrNotFound, nodeID)
	}
	return p, nil
}

// Peers lists the roster ordered by nodeId.
func (s *Store) Peers(ctx context.Context) ([]Peer, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := s.waitApplied(ctx); err != nil {
		return nil, err
	}
	var out []Peer
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{pPeer}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var p Peer
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &p) }); err != nil {
				return fmt.Errorf("%w: peer %s: %v", ErrCorrupted, it.Item().Key()[1:], err)
			}
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing peers: %w", err)
	}
	return out, nil
}

// DeletePeer forgets a peer, so its next sighting pins afresh. It is the
// deliberate, operator-driven way out of a KeyConflictError.
func (s *Store) DeletePeer(ctx context.Context, nodeID string) error {
	j := newJob(ctx, 64, func(t *wtx) (func(), error) {
		t.del(peerKey(nodeID))
		return nil, nil
	})
	errs, err := s.submit(ctx, []*job{j})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return fmt.Errorf("deleting peer %s: %w", nodeID, err)
	}
	return nil
}
