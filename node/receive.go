package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"cmbnode/cmb"
	"cmbnode/e2e"
	"cmbnode/group"
	"cmbnode/lineage"
	"cmbnode/node/events"
	"cmbnode/store"
)

// Source is where a received record came from.
type Source struct {
	PeerID string // libp2p peer that delivered it
	NodeID string // the deliverer's nodeId, once handshaken
	// AuthorKey and AuthorE2E are the author's keys as the frame carried
	// them (cmbnode's cmb frame extension); the roster's pinned keys win.
	AuthorKey string
	AuthorE2E string
	// Via names the path for logs and events: "gossip", "fetch", "catch-up".
	Via string
}

// Checked is a record that passed every receive check, opened if it was
// sealed for this node.
type Checked struct {
	Record    *cmb.Record
	Source    Source
	Directed  bool
	Decrypted bool
	// Duplicate is true when the store already holds the key.
	Duplicate bool
	// MissingParents are parents the store does not hold yet: fetch them.
	MissingParents []string
	authorKey      ed25519.PublicKey
	authorX        []byte
}

// errKeyConflict marks a frame key contradicting the roster's pin, so the
// rejection is counted under its own reason.
var errKeyConflict = errors.New("key conflict")

// ErrNotForUs marks a valid record directed to another member: relay it,
// never store or surface it.
var ErrNotForUs = errors.New("directed to another node")

// Check runs the receive pipeline of MMP §18.3.1 on a record from the mesh:
// shape, group, author key (roster pin, else the frame's key), decryption
// when sealed for us, address, signature, audience. It stores nothing. A
// rejection is a *cmb.Error (or wraps ErrRejected for roster conflicts);
// ErrNotForUs means "valid, relay only".
func (n *Node) Check(ctx context.Context, rec *cmb.Record, src Source) (*Checked, error) {
	n.Counters.Received.Add(1)
	c, err := n.check(ctx, rec, src)
	if err != nil && !errors.Is(err, ErrNotForUs) {
		n.Counters.reject(rejectReason(err))
	}
	return c, err
}

func (n *Node) check(ctx context.Context, rec *cmb.Record, src Source) (*Checked, error) {
	// Group first and cheaply: a cross-group record never reaches the rest
	// (§5.8, §18.3.1's order). Shape is checked by Verify below, or before the
	// signature on the relay-only path, so it runs once per record.
	if err := rec.CheckAudience(cmb.Audience{Group: n.group, Self: rec.To}); err != nil {
		return nil, err
	}
	pub, x, err := n.authorKeys(ctx, rec.CreatedBy, src)
	if err != nil {
		return nil, err
	}
	c := &Checked{Source: src, authorKey: pub, authorX: x, Directed: rec.To != ""}
	if rec.To != "" && !strings.EqualFold(rec.To, n.id.NodeID) {
		// Not ours: the address cannot be recomputed under seal, but the
		// signature binds key, author, time, group and recipient.
		if err := rec.Validate(); err != nil {
			return nil, err
		}
		if err := rec.VerifySignature(pub); err != nil {
			return nil, err
		}
		c.Record = rec
		return c, ErrNotForUs
	}
	if rec.IsSealed() {
		if len(x) == 0 {
			return nil, fmt.Errorf("%w: sealed record from %s, whose encryption key is unknown", ErrRejected, rec.CreatedBy)
		}
		box, err := n.box(x)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRejected, err)
		}
		opened, err := e2e.OpenRecord(rec, box)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRejected, err)
		}
		rec, c.Decrypted = opened, true
	}
	if err := rec.Verify(cmb.Policy{Audience: cmb.Audience{Group: n.group, Self: n.id.NodeID}, AuthorKey: pub}); err != nil {
		return nil, err
	}
	c.Record = rec
	if err := n.pinAuthor(ctx, rec.CreatedBy, pub, x, ""); err != nil {
		return nil, err
	}
	if c.Duplicate, err = n.st.Has(ctx, rec.Key); err != nil {
		return nil, err
	}
	if !c.Duplicate {
		if c.MissingParents, err = lineage.MissingParents(ctx, n.st, rec.Parents()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// authorKeys resolves the author's keys: the roster's pinned keys, else the
// ones the frame carried. A frame key that contradicts the pin is a forgery
// or a conflicting identity and is refused.
func (n *Node) authorKeys(ctx context.Context, author string, src Source) (ed25519.PublicKey, []byte, error) {
	var framePub ed25519.PublicKey
	if src.AuthorKey != "" {
		k, err := cmb.ParsePublicKey(src.AuthorKey)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: frame author key: %v", ErrRejected, err)
		}
		framePub = k
	}
	var frameX []byte
	if src.AuthorE2E != "" {
		k, err := e2e.ParsePublicKey(src.AuthorE2E)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: frame author encryption key: %v", ErrRejected, err)
		}
		frameX = k.Bytes()
	}
	p, err := n.st.GetPeer(ctx, strings.ToLower(author))
	switch {
	case errors.Is(err, store.ErrNotFound):
		if framePub == nil {
			return nil, nil, &cmb.Error{Reason: cmb.ReasonBadSignature, Detail: "no key is known for author " + author}
		}
		return framePub, frameX, nil
	case err != nil:
		return nil, nil, err
	}
	if framePub != nil && len(p.Ed25519) > 0 && !framePub.Equal(ed25519.PublicKey(p.Ed25519)) {
		n.Counters.KeyConflicts.Add(1)
		return nil, nil, fmt.Errorf("%w: %w: author %s presents a different key than the one pinned", ErrRejected, errKeyConflict, author)
	}
	pub := ed25519.PublicKey(p.Ed25519)
	if len(pub) == 0 {
		pub = framePub
	}
	x := p.X25519
	if len(x) == 0 {
		x = frameX
	}
	if pub == nil {
		return nil, nil, &cmb.Error{Reason: cmb.ReasonBadSignature, Detail: "no key is known for author " + author}
	}
	return pub, x, nil
}

// Accept stores a checked record durably and tells listeners. It returns
// whether the store already held it.
func (n *Node) Accept(ctx context.Context, c *Checked) (bool, error) {
	src := c.Source.NodeID
	if src == "" {
		src = c.Source.PeerID
	}
	dup, err := n.put(ctx, c.Record, store.Meta{Source: src, Verified: true, Decrypted: c.Decrypted, Directed: c.Directed})
	if err != nil {
		return false, err
	}
	if dup {
		n.Counters.Duplicates.Add(1)
		return true, nil
	}
	n.Counters.Accepted.Add(1)
	n.bus.Publish(events.Event{Name: events.CMBAccepted, Data: AcceptedEvent{
		Key: c.Record.Key, Source: src, CreatedBy: c.Record.CreatedBy, CreatedAt: c.Record.CreatedAt,
		Group: group.Normalize(c.Record.Group), Fields: FieldsView(&c.Record.Fields), Directed: c.Directed,
		Decision: "admitted", Via: c.Source.Via,
	}})
	return false, nil
}

// AcceptedEvent is the data of a cmb-accepted event. cmbnode runs no SVAF
// gate: every verified record is admitted, so decision is "admitted" and
// drift is null (spec §14 A20 asks for both members).
type AcceptedEvent struct {
	Key       string     `json:"key"`
	Source    string     `json:"source"`
	CreatedBy string     `json:"createdBy"`
	CreatedAt int64      `json:"createdAt"`
	Group     string     `json:"group"`
	Fields    FieldsJSON `json:"fields"`
	Directed  bool       `json:"directed"`
	Decision  string     `json:"decision"`
	Drift     *float64   `json:"drift"`
	Via       string     `json:"via,omitempty"`
}

func rejectReason(err error) string {
	if r := cmb.ReasonOf(err); r != "" {
		return string(r)
	}
	if errors.Is(err, ErrRejected) {
		if errors.Is(err, errKeyConflict) || errors.Is(err, store.ErrKeyConflict) {
			return "key-conflict"
		}
		return "rejected"
	}
	return "internal"
}
