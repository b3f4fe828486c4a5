package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
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
	// Confirmed is true when the pinned keys came from an authenticated
	// source (a handshake, whose secure channel proves the key, or the
	// node's own identity). An unconfirmed pin came with a gossiped frame
	// and yields to the first confirmed key offered for the nodeId.
	Confirmed bool `json:"confirmed,omitempty"`
	// Trusted is true when the operator chose the key (TrustPeer: `cmbnode
	// trust`, or an invite's inviter): no handshake can dispute it, so a
	// different key is refused (*KeyConflictError), not recorded.
	Trusted bool `json:"trusted,omitempty"`
	// Claimants are the other keys that proved, in a handshake, to claim
	// this nodeId while Ed25519 was pinned confirmed. First sight is no
	// proof of who owns a nodeId, so neither key wins: while there are
	// claimants the nodeId is in conflict, its records are quarantined,
	// and only TrustPeer ends it.
	Claimants []Claimant `json:"claimants,omitempty"`
}

// Claimant is one more key a handshake presented for a pinned nodeId.
type Claimant struct {
	Ed25519 []byte    `json:"ed25519"`
	X25519  []byte    `json:"x25519,omitempty"`
	Name    string    `json:"name,omitempty"`
	Since   time.Time `json:"since"`
}

// Conflicted reports whether more than one key claims the nodeId.
func (p *Peer) Conflicted() bool { return len(p.Claimants) > 0 }

// Claims reports whether ed is the pinned key or a claimant's.
func (p *Peer) Claims(ed []byte) bool {
	if bytes.Equal(p.Ed25519, ed) {
		return true
	}
	for _, c := range p.Claimants {
		if bytes.Equal(c.Ed25519, ed) {
			return true
		}
	}
	return false
}

// PeerUpdate is what PutPeer did.
type PeerUpdate struct {
	Peer Peer // the roster entry as stored
	// Changed is false when the sighting added nothing, and nothing was written.
	Changed bool
	// Created: the nodeId had no roster entry; this sighting made it.
	Created bool
	// Replaced is the unconfirmed Ed25519 key a confirmed one displaced, or nil.
	Replaced []byte
	// NewClaimant: this sighting made (or widened) a conflict over the
	// nodeId; Conflicted: the nodeId is in conflict (Peer.Claimants).
	NewClaimant, Conflicted bool
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
// presents. A known one may fill in a key it never presented and update its
// name, but never change a pinned key (*KeyConflictError) — except that a
// confirmed sighting replaces an unconfirmed pin (PeerUpdate.Replaced).
// LastSeen moves with a confirmed sighting or another change, so a record's
// frame that adds nothing writes nothing.
func (s *Store) PutPeer(ctx context.Context, p Peer) (PeerUpdate, error) {
	if err := checkName("nodeId", p.NodeID, false); err != nil {
		return PeerUpdate{}, err
	}
	if p.LastSeen.IsZero() {
		p.LastSeen = s.opts.Now()
	}
	// Most sightings add nothing: answer those from a read, without a
	// durable commit. The job below decides again on what it reads.
	if cur, err := s.GetPeer(ctx, p.NodeID); err == nil {
		up, err := mergePeer(cur, p)
		if err != nil {
			return PeerUpdate{}, fmt.Errorf("recording peer %s: %w", p.NodeID, err)
		}
		if !up.Changed {
			return up, nil
		}
	} else if !errors.Is(err, ErrNotFound) {
		return PeerUpdate{}, err
	}
	var up PeerUpdate
	j := newJob(ctx, 512, func(t *wtx) (func(), error) {
		cur, found, err := readPeerTx(t, p.NodeID)
		if err != nil {
			return nil, err
		}
		up = PeerUpdate{}
		if !found {
			up.Peer, up.Changed, up.Created = p, true, true
			if up.Peer.FirstSeen.IsZero() {
				up.Peer.FirstSeen = p.LastSeen
			}
		} else if up, err = mergePeer(cur, p); err != nil {
			return nil, err
		}
		if !up.Changed {
			return nil, nil
		}
		v, err := json.Marshal(up.Peer)
		if err != nil {
			return nil, err
		}
		s.peers.wrote(t.b.seq)
		t.set(peerKey(p.NodeID), v)
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return PeerUpdate{}, fmt.Errorf("recording peer %s: %w", p.NodeID, err)
	}
	return up, nil
}

// mergePeer applies sighting p to roster entry cur.
func mergePeer(cur, p Peer) (PeerUpdate, error) {
	out := cur
	up := PeerUpdate{}
	if len(p.Ed25519) > 0 && len(cur.Ed25519) > 0 && !cur.Trusted && cur.Confirmed && p.Confirmed &&
		!bytes.Equal(cur.Ed25519, p.Ed25519) || cur.Conflicted() && cur.Claims(p.Ed25519) {
		// Two proved keys for one nodeId: record the claim, pick neither.
		up.Conflicted = true
		if !cur.Claims(p.Ed25519) {
			out.Claimants = append(slices.Clone(cur.Claimants), Claimant{Ed25519: p.Ed25519, X25519: p.X25519, Name: p.Name, Since: p.LastSeen})
			up.NewClaimant, up.Changed = true, true
		}
		up.Peer = out
		return up, nil
	}
	replace := p.Confirmed && !cur.Confirmed && len(p.Ed25519) > 0 &&
		len(cur.Ed25519) > 0 && !bytes.Equal(cur.Ed25519, p.Ed25519)
	if replace {
		up.Replaced = cur.Ed25519
		out.Ed25519, out.X25519 = p.Ed25519, p.X25519
	} else {
		for _, k := range []struct {
			kind           string
			pinned, offers *[]byte
		}{{"Ed25519", &out.Ed25519, &p.Ed25519}, {"X25519", &out.X25519, &p.X25519}} {
			switch {
			case len(*k.offers) == 0:
			case len(*k.pinned) == 0:
				*k.pinned = *k.offers
			case !bytes.Equal(*k.pinned, *k.offers):
				if p.Confirmed && !cur.Confirmed {
					*k.pinned = *k.offers // the handshake's key wins over the frame's
					continue
				}
				return PeerUpdate{}, &KeyConflictError{NodeID: p.NodeID, Kind: k.kind, Pinned: *k.pinned, Offered: *k.offers, FirstSeen: cur.FirstSeen}
			}
		}
	}
	if p.Confirmed && len(out.Ed25519) > 0 {
		out.Confirmed = true
	}
	if p.Name != "" {
		out.Name = p.Name
	}
	up.Changed = !bytes.Equal(out.Ed25519, cur.Ed25519) || !bytes.Equal(out.X25519, cur.X25519) ||
		out.Confirmed != cur.Confirmed || out.Name != cur.Name
	// A handshake is a sighting worth recording; a record's frame is not.
	if (up.Changed || p.Confirmed) && p.LastSeen.After(out.LastSeen) {
		out.LastSeen = p.LastSeen
		up.Changed = true
	}
	up.Peer = out
	return up, nil
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

// peerCache holds roster entries as GetPeer read them: every received
// record's author is looked up, and reading and decoding badger's copy
// was ~5 % of a receiver's CPU.
//
// Roster writes are acknowledged (durable in the log) before badger holds
// them. Each write (PutPeer, TrustPeer, DeletePeers), as the writer builds
// its batch, so before anyone is told it happened, clears the cache, moves
// gen and records the batch's sequence number in last. The cache is used,
// and filled, only by a read that saw badger holding batch last or later
// (appliedSeq), and an entry is kept only if gen did not move since the
// read began: so an entry always holds every write to the roster, and
// while a write is not in badger yet, GetPeer reads badger as before
// (waiting, as then, for what was acknowledged before it). Entries are
// cloned in and out: a caller may change the Peer it gets.
type peerCache struct {
	mu   sync.Mutex
	gen  uint64
	last uint64 // batch of the latest roster write
	m    map[string]Peer
}

// peerCacheMax bounds the cache; it starts over when full.
const peerCacheMax = 4096

// get returns id's entry if the cache may be used with badger at applied,
// and the generation a read that fills it must find again.
// A shared entry is the cache's own: its slices must not be changed.
func (c *peerCache) get(id string, applied uint64, shared bool) (p Peer, gen uint64, usable, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if applied < c.last {
		return Peer{}, c.gen, false, false
	}
	p, ok = c.m[id]
	if ok && !shared {
		p = p.clone()
	}
	return p, c.gen, true, ok
}

// put keeps p, read at generation gen by a read get found usable.
func (c *peerCache) put(gen uint64, p Peer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return // a write came since the read began: it may be stale
	}
	if c.m == nil || len(c.m) >= peerCacheMax {
		c.m = make(map[string]Peer)
	}
	c.m[p.NodeID] = p.clone()
}

// wrote is called by each roster write in batch seq, before it is
// acknowledged.
func (c *peerCache) wrote(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.last = max(c.last, seq)
	c.m = nil
}

// clone is p with its own copies of every slice.
func (p Peer) clone() Peer {
	p.Ed25519, p.X25519 = bytes.Clone(p.Ed25519), bytes.Clone(p.X25519)
	if p.Claimants != nil {
		cs := make([]Claimant, len(p.Claimants))
		for i, c := range p.Claimants {
			c.Ed25519, c.X25519 = bytes.Clone(c.Ed25519), bytes.Clone(c.X25519)
			cs[i] = c
		}
		p.Claimants = cs
	}
	return p
}

// GetPeer returns the roster entry for nodeID, or ErrNotFound.
func (s *Store) GetPeer(ctx context.Context, nodeID string) (Peer, error) {
	return s.getPeer(ctx, nodeID, false)
}

// GetPeerShared is GetPeer for a caller that only reads the entry: its
// slices (keys, claimants) may be the store's cached copies, shared with
// every other such caller, so they must never be changed. The receive
// path looks up every record's author; this spares it two copies a record.
func (s *Store) GetPeerShared(ctx context.Context, nodeID string) (Peer, error) {
	return s.getPeer(ctx, nodeID, true)
}

func (s *Store) getPeer(ctx context.Context, nodeID string, shared bool) (Peer, error) {
	if err := s.readable(ctx); err != nil {
		return Peer{}, err
	}
	// applied is read after readable waited for it: at least what was
	// acknowledged before the call.
	cached, gen, usable, ok := s.peers.get(nodeID, s.appliedSeq.Load(), shared)
	if ok {
		return cached, nil
	}
	var p Peer
	var found bool
	err := s.view(func(txn *badger.Txn) error {
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
	if usable && p.NodeID == nodeID {
		s.peers.put(gen, p)
	}
	return p, nil
}

// Peers lists the roster ordered by nodeId.
func (s *Store) Peers(ctx context.Context) ([]Peer, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	var out []Peer
	err := s.scan(ctx, badger.IteratorOptions{PrefetchValues: true, Prefix: []byte{pPeer}}, func(item *badger.Item) error {
		var p Peer
		if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &p) }); err != nil {
			return fmt.Errorf("%w: peer %s: %v", ErrCorrupted, item.Key()[1:], err)
		}
		out = append(out, p)
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
	if err := s.DeletePeers(ctx, []string{nodeID}); err != nil {
		return fmt.Errorf("deleting peer %s: %w", nodeID, err)
	}
	return nil
}

// DeletePeers forgets peers in one durable commit (the roster's expiry).
func (s *Store) DeletePeers(ctx context.Context, nodeIDs []string) error {
	j := newJob(ctx, 64*len(nodeIDs), func(t *wtx) (func(), error) {
		s.peers.wrote(t.b.seq)
		for _, id := range nodeIDs {
			t.del(peerKey(id))
		}
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return fmt.Errorf("deleting %d peers: %w", len(nodeIDs), err)
	}
	return nil
}

// TrustPeer pins p.Ed25519 for p.NodeID as the operator's choice: confirmed
// and trusted, ending any conflict (the other claimants are forgotten). The
// X25519 key is p's, or else the one the chosen key came with. It returns
// the roster entry as it was (found false for a nodeId never seen).
func (s *Store) TrustPeer(ctx context.Context, p Peer) (prev Peer, found bool, err error) {
	if err := checkName("nodeId", p.NodeID, false); err != nil {
		return Peer{}, false, err
	}
	if len(p.Ed25519) == 0 {
		return Peer{}, false, fmt.Errorf("%w: trusting %s: no Ed25519 key", ErrInvalid, p.NodeID)
	}
	now := s.opts.Now()
	j := newJob(ctx, 512, func(t *wtx) (func(), error) {
		cur, ok, err := readPeerTx(t, p.NodeID)
		if err != nil {
			return nil, err
		}
		prev, found = cur, ok
		out := cur
		if !ok {
			out = Peer{NodeID: p.NodeID, FirstSeen: now}
		}
		x := p.X25519
		if len(x) == 0 {
			if bytes.Equal(cur.Ed25519, p.Ed25519) {
				x = cur.X25519
			}
			for _, c := range cur.Claimants {
				if bytes.Equal(c.Ed25519, p.Ed25519) {
					x = c.X25519
					if c.Name != "" {
						out.Name = c.Name
					}
				}
			}
		}
		if p.Name != "" {
			out.Name = p.Name
		}
		out.Ed25519, out.X25519, out.Confirmed, out.Trusted, out.Claimants = p.Ed25519, x, true, true, nil
		out.LastSeen = now
		v, err := json.Marshal(out)
		if err != nil {
			return nil, err
		}
		s.peers.wrote(t.b.seq)
		t.set(peerKey(p.NodeID), v)
		return nil, nil
	})
	if err := s.submitOne(ctx, j); err != nil {
		return Peer{}, false, fmt.Errorf("trusting a key for %s: %w", p.NodeID, err)
	}
	return prev, found, nil
}
