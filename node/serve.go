package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/store"
)

// What this node gives its group's peers: records fetched by key, the keys
// and per-time-bucket digests catch-up compares, and the author keys a
// frame carries. The rule about who may receive what is servable, so the
// key listings never offer a record a fetch would refuse.

// ServedRecord is a record as a peer may receive it, with its author's keys
// as a frame carries them (see FrameKeys).
type ServedRecord struct {
	// Raw is the record's wire form: exactly as held, or sealed for the
	// requester when the record is directed.
	Raw       []byte
	AuthorKey string
	AuthorE2E string
}

// Serve returns the record held under exactly key in the form requester
// (a handshaken peer's nodeId) may receive. ok is false, with a nil error,
// when the record is not held or is not requester's to have (servable):
// a peer learns nothing of records it may not receive. An error means the
// record could not be read, or a directed record could not be sealed for
// its recipient.
func (n *Node) Serve(ctx context.Context, key, requester string) (_ ServedRecord, ok bool, _ error) {
	r, err := n.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return ServedRecord{}, false, nil
	}
	if err != nil {
		return ServedRecord{}, false, fmt.Errorf("serving %s: %w", key, err)
	}
	if !n.servable(r, requester) {
		return ServedRecord{}, false, nil
	}
	raw := r.Raw
	if r.To != "" {
		if raw, err = n.sealFor(ctx, raw, r.To); err != nil {
			return ServedRecord{}, false, fmt.Errorf("serving %s: sealing it for its recipient: %w", key, err)
		}
	}
	pub, x := n.FrameKeys(ctx, r.CreatedBy)
	return ServedRecord{Raw: raw, AuthorKey: pub, AuthorE2E: x}, true, nil
}

// servable is the rule for what requester may receive: nothing of another
// group, nothing quarantined or forgotten (surfaced nowhere), and a directed record
// only for its recipient and only when it was authored on this machine (by
// the node or a local agent) — only there and at the recipient is it held,
// and there it is kept in clear, so it can be sealed. A relay holds a
// directed record only sealed for someone else.
func (n *Node) servable(r store.Record, requester string) bool {
	if r.Group != n.group || r.Meta.Quarantined || r.Meta.Forgotten {
		return false
	}
	if r.To == "" {
		return true
	}
	return r.Meta.Source == SourceLocal && strings.EqualFold(r.To, requester)
}

// sealFor seals a record held in clear for nodeID, whose X25519 key the
// roster holds (from its handshake).
func (n *Node) sealFor(ctx context.Context, raw []byte, nodeID string) ([]byte, error) {
	rec, err := cmb.Decode(raw)
	if err != nil {
		return nil, err
	}
	box, err := n.boxFor(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	sealed, err := e2e.SealRecord(rec, box, rand.Reader)
	if err != nil {
		return nil, err
	}
	return sealed.Encode(), nil
}

// ScanServable calls fn for each record of the group created in [from, to)
// that Serve would give requester, in (createdAt, key) order, so catch-up
// lists no key it would then refuse. An error from fn stops the scan and is
// returned wrapped. A record that cannot be read is left out: the requester
// finds it on a later round.
func (n *Node) ScanServable(ctx context.Context, requester string, from, to int64, fn func(key string, createdAt int64) error) error {
	err := n.st.Scan(ctx, store.Window{Group: n.group, From: from, To: to}, func(kt store.KeyTime) error {
		r, err := n.st.GetLineage(ctx, kt.Key)
		if err != nil || !n.servable(r, requester) {
			return nil
		}
		return fn(kt.Key, kt.CreatedAt)
	})
	if err != nil {
		return fmt.Errorf("listing records served to %s: %w", requester, err)
	}
	return nil
}

// Bucket summarises the group's records created in one time span: their
// count and a SHA-256 over their keys. Two nodes with equal buckets hold the
// same keys for that span.
type Bucket = store.Bucket

// Digest summarises the group's records in [from, to) in buckets widthMs
// wide, leaving out empty buckets, at most limit of them (0: every one);
// more is true when later buckets of the window hold records. It covers
// every record this node holds unquarantined for the group, directed ones
// included, so two peers compare what they hold rather than what each may
// serve the other. The limit bounds the work as well as the answer: the
// scan stops at the first bucket past it.
func (n *Node) Digest(ctx context.Context, from, to, widthMs int64, limit int) (_ []Bucket, more bool, _ error) {
	bs, more, err := n.st.BucketsUpTo(ctx, n.group, from, to, widthMs, limit)
	if err != nil {
		return nil, false, fmt.Errorf("digest of %s: %w", n.group, err)
	}
	return bs, more, nil
}

// Has reports whether the store holds key, quarantined or not, or forgot
// it: a held key is never fetched again, so neither a quarantined record
// nor a forgotten one is re-admitted by fetch, catch-up or gossip.
func (n *Node) Has(ctx context.Context, key string) (bool, error) {
	if n.st.IsForgotten(key) {
		return true, nil
	}
	return n.st.Has(ctx, key)
}

// FrameKeys returns an author's keys as a frame carrying its record presents
// them: this node's own for our nodeId, else the roster's pin, else none
// (receivers then rely on their own pin). A roster that cannot be read is
// treated as holding no pin.
func (n *Node) FrameKeys(ctx context.Context, author string) (pub, x string) {
	if strings.EqualFold(author, n.id.NodeID) {
		return n.ownPub, n.ownX
	}
	p, err := n.st.GetPeer(ctx, strings.ToLower(author))
	if err != nil {
		return "", ""
	}
	if len(p.Ed25519) > 0 {
		pub = cmb.EncodeKey(p.Ed25519)
	}
	if len(p.X25519) > 0 {
		if k, err := e2e.ParsePublicKey(cmb.EncodeKey(p.X25519)); err == nil {
			x = e2e.EncodePublicKeyDER(k)
		}
	}
	return pub, x
}
