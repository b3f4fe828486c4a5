package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/store"
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
	// Duplicate is true when the store already holds the key (or forgot
	// it). Asserted: the held record is another author's, and this one
	// was kept as that author's assertion of the content (assert.go).
	Duplicate bool
	Asserted  bool
	// KeyConfirmed is true when the author key the record verified against
	// came from an authenticated source (our identity, a handshake, a local
	// agent), not only from the gossiped frame.
	KeyConfirmed bool
	// MissingParents are parents the store does not hold yet: fetch them.
	MissingParents []string
	authorKey      ed25519.PublicKey
	authorX        []byte
	// trustGen is the node's trust generation at the check: Accept checks
	// the author's pin again if a handshake replaced a pin since.
	trustGen uint64
}

// ErrKeyConflict is wrapped (with ErrRejected) when an author's key
// contradicts the one pinned: a frame's key, a handshake's (roster
// conflicts also match store.ErrKeyConflict), or a pin a handshake replaced
// after the check. Such a rejection is counted under its own reason.
var ErrKeyConflict = errors.New("key conflict")

// pinConflict is the roster's refusal of a key (store.ErrKeyConflict), read
// as this node's ErrKeyConflict; its message is the roster's.
type pinConflict struct{ error }

func (e pinConflict) Unwrap() error        { return e.error }
func (e pinConflict) Is(target error) bool { return target == ErrKeyConflict }

// errLocalState marks a rejection that rests on what this node holds (its
// roster, its stored lineage) rather than on the record alone.
var errLocalState = errors.New("judged against this node's state")

// IsLocalVerdict reports a rejection that rests on this node's own state or
// policy (pinned keys, the signer set, stored lineage, strict signatures)
// rather than on the record alone: a peer holding other state may have
// relayed it in good faith, so it is no evidence against the sender.
func IsLocalVerdict(err error) bool {
	return errors.Is(err, ErrKeyConflict) ||
		errors.Is(err, errLocalState) || errors.Is(err, cmb.ErrUnsigned)
}

// ErrNotForUs marks a valid record directed to another member: relay it,
// never store or surface it.
var ErrNotForUs = errors.New("directed to another node")

// Check runs the receive pipeline of MMP §18.3.1 on a record from the mesh:
// shape, group, author key (roster pin, else the frame's key), decryption
// when sealed for us, address, signature, audience, lineage. It writes only
// what it learns: the first pin of an author's key and the first sight of
// an author that signs. A rejection is a *cmb.Error (or wraps ErrRejected
// for roster conflicts); ErrNotForUs means "valid, relay only".
func (n *Node) Check(ctx context.Context, rec *cmb.Record, src Source) (*Checked, error) {
	n.Counters.Received.Add(1)
	n.noteActive()
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
	if err := n.checkFuture(rec); err != nil {
		return nil, err
	}
	gen := n.trustGen.Load()
	a, err := n.authorKeys(ctx, rec.CreatedBy, src)
	if err != nil {
		return nil, err
	}
	unsigned := rec.IsUnsigned()
	switch {
	case a.pub == nil && !unsigned:
		return nil, &cmb.Error{Reason: cmb.ReasonBadSignature, Detail: "no key is known for author " + cmb.Truncate(rec.CreatedBy, 64), Err: errLocalState}
	case unsigned && a.pub == nil && n.st.HasSigned(rec.CreatedBy):
		return nil, &cmb.Error{Reason: cmb.ReasonUnsigned, Detail: "record is unsigned but author " + cmb.Truncate(rec.CreatedBy, 64) + " has signed before", Err: cmb.ErrDowngrade}
	}
	c := &Checked{Source: src, authorKey: a.pub, authorX: a.x, Directed: rec.To != "", KeyConfirmed: a.confirmed, trustGen: gen}
	if rec.To != "" && !strings.EqualFold(rec.To, n.id.NodeID) {
		// Not ours: the address cannot be recomputed under seal, but the
		// signature binds key, author, time, group and recipient.
		if err := rec.Validate(); err != nil {
			return nil, err
		}
		if a.pub == nil {
			return nil, &cmb.Error{Reason: cmb.ReasonUnsigned, Detail: "an unsigned directed record is not relayed"}
		}
		if err := rec.VerifySignatureWith(a.pub, n.verifyKeys.get(a.pub)); err != nil {
			return nil, err
		}
		c.Record = rec
		return c, ErrNotForUs
	}
	if rec.IsSealed() {
		if len(a.x) == 0 {
			return nil, fmt.Errorf("%w: sealed record from %s, whose encryption key is unknown", ErrRejected, rec.CreatedBy)
		}
		box, err := n.box(a.x)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRejected, err)
		}
		opened, err := e2e.OpenRecord(rec, box)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRejected, err)
		}
		rec, c.Decrypted = opened, true
	}
	policy := cmb.Policy{Audience: cmb.Audience{Group: n.group, Self: n.id.NodeID}, AuthorKey: a.pub, AllowUnsigned: n.allowUnsigned}
	if a.pub != nil {
		policy.AuthorVerifyKey = n.verifyKeys.get(a.pub)
	}
	if err := rec.Verify(policy); err != nil {
		return nil, err
	}
	c.Record = rec
	// A forgotten key counts as held: it is never accepted again.
	if c.Duplicate, err = n.Has(ctx, rec.Key); err != nil {
		return nil, err
	}
	// Charged once verified, so a forger cannot spend an author's quota,
	// and only for what would be stored.
	if !c.Duplicate {
		if err := n.checkQuota(rec, src); err != nil {
			return nil, err
		}
	}
	if a.disputed {
		// Kept for the operator's decision, but neither surfaced nor
		// relayed: a squatter's records must not reach other members.
		if !c.Duplicate {
			if _, err := n.keep(ctx, rec, store.Meta{Source: src.NodeID, Verified: true, Decrypted: c.Decrypted, Quarantined: true}); err != nil {
				return nil, err
			}
			n.Counters.Quarantined.Add(1)
		}
		return nil, fmt.Errorf("%w: %w: %w: %s (record %s kept in quarantine; `cmbnode trust` picks a key)",
			ErrRejected, ErrDisputed, errLocalState, rec.CreatedBy, rec.Key)
	}
	if !c.Duplicate {
		rep, err := lineage.Validate(ctx, n.st, rec.Key, rec.Parents(), rec.Ancestors())
		if errors.Is(err, lineage.ErrLineage) {
			return nil, &cmb.Error{Reason: cmb.ReasonBadLineage, Detail: strings.Join(rep.Problems, "; "), Err: errLocalState}
		}
		if err != nil {
			return nil, err
		}
		c.MissingParents = rep.MissingParents
	}
	if a.needsPin {
		if _, err := n.pinAuthor(ctx, store.Peer{NodeID: rec.CreatedBy, Ed25519: a.pub, X25519: a.x}); err != nil {
			return nil, err
		}
	}
	if !unsigned {
		if err := n.st.MarkSigned(ctx, rec.CreatedBy); err != nil {
			return nil, err
		}
	}
	if c.Duplicate {
		// The key is held: if by another author, this valid record is
		// that author's assertion of the same content, kept here, since
		// the mesh does not Accept duplicates.
		held, ok, err := n.heldFor(ctx, rec.Key)
		if err != nil {
			return nil, err
		}
		if ok {
			if _, c.Asserted, err = n.assertOther(ctx, rec, held); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// authorKey is how the node knows an author's keys.
type authorKey struct {
	pub ed25519.PublicKey // nil when no key is known
	x   []byte
	// confirmed: the key came from an authenticated source.
	confirmed bool
	// needsPin: the frame offers a key the roster lacks for a nodeId author.
	needsPin bool
	// disputed: two keys claim the author's nodeId (ErrDisputed).
	disputed bool
}

// authorKeys resolves the author's keys: our own identity for our nodeId,
// else the roster's pinned keys, else the ones the frame carried. A frame
// key that contradicts the pin is a forgery or a conflicting identity and
// is refused.
func (n *Node) authorKeys(ctx context.Context, author string, src Source) (authorKey, error) {
	fk, err := n.frameKeys.parse(src.AuthorKey, src.AuthorE2E)
	if err != nil {
		return authorKey{}, err
	}
	framePub, frameX := fk.pub, fk.x
	conflict := func() (authorKey, error) {
		n.Counters.KeyConflicts.Add(1)
		return authorKey{}, fmt.Errorf("%w: %w: author %s presents a different key than the one pinned", ErrRejected, ErrKeyConflict, cmb.Truncate(author, 64))
	}
	if strings.EqualFold(author, n.id.NodeID) {
		// Nobody speaks for this node but its own key.
		own := n.id.Ed25519.Public().(ed25519.PublicKey)
		if framePub != nil && !framePub.Equal(own) {
			return conflict()
		}
		return authorKey{pub: own, x: n.id.X25519.PublicKey().Bytes(), confirmed: true}, nil
	}
	nodeAuthor := cmb.ValidateNodeID(author) == nil
	if !nodeAuthor {
		// Agent-name authors (allowed by the schema) are not pinned: only the
		// frame vouches for their key.
		return authorKey{pub: framePub, x: frameX}, nil
	}
	// Read only: the keys are kept in Checked and compared, never changed.
	p, err := n.st.GetPeerShared(ctx, strings.ToLower(author))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return authorKey{pub: framePub, x: frameX, needsPin: framePub != nil}, nil
	case err != nil:
		return authorKey{}, err
	}
	if p.Conflicted() {
		// Either claimant's signature is checked, so the record is kept
		// (quarantined) whichever of them is the member.
		a := authorKey{pub: ed25519.PublicKey(p.Ed25519), x: p.X25519, disputed: true}
		if framePub != nil {
			if !p.Claims(framePub) {
				return conflict()
			}
			a.pub = framePub
			for _, c := range p.Claimants {
				if framePub.Equal(ed25519.PublicKey(c.Ed25519)) {
					a.x = c.X25519
				}
			}
		}
		return a, nil
	}
	if framePub != nil && len(p.Ed25519) > 0 && !framePub.Equal(ed25519.PublicKey(p.Ed25519)) {
		return conflict()
	}
	a := authorKey{pub: ed25519.PublicKey(p.Ed25519), x: p.X25519, confirmed: p.Confirmed && len(p.Ed25519) > 0}
	if len(a.pub) == 0 {
		a.pub, a.needsPin, a.confirmed = framePub, framePub != nil, false
	}
	if len(a.x) == 0 && len(frameX) > 0 {
		a.x, a.needsPin = frameX, true
	}
	if len(a.pub) == 0 {
		a.pub = nil
	}
	return a, nil
}

// Accept stores a checked record durably and tells listeners. It returns
// whether the store already held it.
func (n *Node) Accept(ctx context.Context, c *Checked) (bool, error) {
	if c.trustGen != n.trustGen.Load() {
		// A handshake replaced a pin since the check: the key this record
		// verified against may no longer be the author's.
		a, err := n.authorKeys(ctx, c.Record.CreatedBy, Source{})
		if err != nil {
			return false, err
		}
		if a.pub != nil && c.authorKey != nil && !a.pub.Equal(c.authorKey) {
			n.Counters.KeyConflicts.Add(1)
			n.Counters.reject("key-conflict")
			return false, fmt.Errorf("%w: %w: author %s's key was replaced by a handshake", ErrRejected, ErrKeyConflict, c.Record.CreatedBy)
		}
	}
	src := c.Source.NodeID
	if src == "" {
		src = c.Source.PeerID
	}
	// A broadcast record is judged before it is stored, so it is never its
	// own anchor; a directed one is surfaced unconditionally (MMP §9.4) and
	// an imported one is this node's own memory restored: neither carries a
	// verdict.
	var v *verdictRecord
	var annexes []store.ItemAnnex
	if !c.Directed && !c.Duplicate && c.Source.Via != SourceImport {
		jv, a, err := n.judge(ctx, c.Record)
		if err != nil {
			return false, err
		}
		v, annexes = &jv, a
	}
	// The verdict is written in the record's own commit: a stored broadcast
	// record always has its verdict.
	res, err := n.keep(ctx, c.Record, store.Meta{Source: src, Verified: true, Decrypted: c.Decrypted, Directed: c.Directed}, annexes...)
	if err != nil {
		return false, err
	}
	if res.Duplicate {
		n.Counters.Duplicates.Add(1)
		return true, nil
	}
	n.Counters.Accepted.Add(1)
	ev := AcceptedEvent{
		Key: c.Record.Key, Source: src, CreatedBy: c.Record.CreatedBy, CreatedAt: c.Record.CreatedAt,
		Group: group.Normalize(c.Record.Group), Directed: c.Directed,
		Decision: DecisionDirected, Via: c.Source.Via,
	}
	if !c.Directed {
		ev.Decision = DecisionImported
	}
	if v != nil {
		n.countVerdict(c.Record.Key, *v)
		drift := v.Drift
		ev.Decision, ev.Drift, ev.Nearest, ev.Hidden = string(v.Decision), &drift, v.Nearest, n.Hidden(c.Record.Key)
	}
	// Replay (resume.go) rebuilds this event from the store: a member
	// added here must be kept there too, or in the ring.
	n.accepted.publish(n.bus, ev, &c.Record.Fields, v != nil)
	return false, nil
}

// Decisions of records SVAF does not judge: one directed to this node is
// surfaced unconditionally (MMP §9.4); an imported one (Import) is this
// node's own memory restored.
const (
	DecisionDirected = "directed"
	DecisionImported = "imported"
)

// AcceptedEvent is the data of a cmb-accepted event, published for every
// verified record stored, whatever SVAF decided (nothing is deleted):
// decision is SVAF's verdict (aligned, guarded, redundant, rejected) with
// its totalDrift, or "directed" with a null drift for a record directed to
// us (spec §14 A20 asks for both members). Hidden says whether the surface
// policy keeps it out of recall, CGP and the recent listing.
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
	// Nearest is the anchor a redundant record duplicates.
	Nearest string `json:"nearest,omitempty"`
	Hidden  bool   `json:"hidden,omitempty"`
	Via     string `json:"via,omitempty"`
	// Cursor is the event's place in this node's order of accepted
	// records: `listen` with it as `after` resumes after it (resume.go).
	// Seq is its number in that order.
	Cursor string `json:"cursor"`
	Seq    uint64 `json:"-"`
}

func rejectReason(err error) string {
	if r := cmb.ReasonOf(err); r != "" {
		return string(r)
	}
	if errors.Is(err, ErrRejected) {
		if errors.Is(err, ErrKeyConflict) {
			return "key-conflict"
		}
		if errors.Is(err, ErrDisputed) {
			return "author-disputed"
		}
		return "rejected"
	}
	return "internal"
}
