// Package node is the daemon's core: it holds the identity, the store and
// the event bus, and owns the two ways a record enters the node — authored
// here (Remember, Publish) or received from the mesh (Check, then Accept).
// The local socket, the mesh and the CGP provider are adapters around it.
package node

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/node/embed"
	"github.com/cmbnode/cmbnode/node/events"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/store"
)

// SourceLocal marks records authored on this machine.
const SourceLocal = "local"

// SourceGossip is Source.Via for a record a peer pushed by gossip (the
// mesh's other paths name themselves: "fetch", "catch-up").
const SourceGossip = "gossip"

// Options configure a Node.
type Options struct {
	Home     string
	Group    string
	Identity *identity.Identity
	Logger   *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StoreOptions tune the badger store.
	StoreOptions store.Options
	// AllowUnsigned admits unsigned records from authors whose key is not
	// known and who never signed (MMP §18.3.1's permissive rule). Off by
	// default (config strict_signatures = true).
	AllowUnsigned bool
	// Version is the build's version, reported by Status.
	Version string
	// Retriever, if set, adds its evidence to the text index's in Recall
	// and SearchText (rank.go).
	Retriever Retriever
	// Encoder, if set, is the dense encoder: per-field vectors for every
	// record, computed off the write paths, fused into ranking and used by
	// SVAF (dense.go). Dense tunes its use.
	Encoder embed.Encoder
	Dense   DenseOptions
	// SVAF tunes admission of received broadcast records (admission.go).
	SVAF SVAFOptions
	// Limits bound admission and the roster (limits.go).
	Limits Limits
	// AcceptedRing is how many accepted records a listener can resume
	// after (resume.go; 0: DefaultAcceptedRing).
	AcceptedRing int
}

// Mesh is the node's link to its group. The node runs alone until one is attached.
type Mesh interface {
	// Publish broadcasts a record (sealed or not) to the group. raw, when
	// not nil, is rec.Encode()'s bytes, which the frame carries as they
	// are rather than encoding the record again.
	Publish(ctx context.Context, rec *cmb.Record, raw []byte) error
	// Peers lists handshaken peers.
	Peers() []PeerInfo
	// PeerID and Addrs describe this node on the network.
	PeerID() string
	Addrs() []string
}

// PeerInfo describes one handshaken peer.
type PeerInfo struct {
	NodeID string   `json:"nodeId"`
	Name   string   `json:"name"`
	PeerID string   `json:"peerId"`
	Group  string   `json:"group"`
	Addrs  []string `json:"addrs"`
	// Version is the MMP protocol version of the peer's handshake; Build
	// its cmbnode version, when it runs cmbnode and says so.
	Version string `json:"version"`
	Build   string `json:"build,omitempty"`
	// E2EPublicKey is the peer's X25519 key as its handshake's
	// e2ePublicKey carried it (base64 DER), from the roster.
	E2EPublicKey string `json:"e2ePublicKey,omitempty"`
	// Conn is how the peer is connected: "direct", "relayed" when every
	// connection to it runs through a circuit relay, "direct+relayed"
	// while it moves from a relay to a direct connection.
	Conn string `json:"conn,omitempty"`
}

// Connector is a mesh that dials a peer on request (`cmbnode connect`).
// Connect returns once the peer is admitted (handshake and, in a private
// group, membership proof), or an error matching ErrBadRequest (the
// address), ErrUnavailable (the dial) or ErrRejected (the handshake or
// proof).
type Connector interface {
	Connect(ctx context.Context, addr string) (PeerInfo, error)
}

// Syncer is a mesh that reports catch-up progress, for status and for
// answers given while the node is still receiving what its peers hold.
type Syncer interface {
	Sync() SyncProgress
}

// SyncProgress is how far a catch-up is: while Syncing, Received records
// have arrived since it began, of about Expected (an estimate from the
// peers' digests, never below Received), from Peers peers; ETA is the time
// left at the rate so far (0 until there is a rate).
type SyncProgress struct {
	Syncing  bool          `json:"syncing"`
	Received int64         `json:"received"`
	Expected int64         `json:"expected"`
	Peers    int           `json:"peers"`
	Elapsed  time.Duration `json:"elapsedNs"`
	ETA      time.Duration `json:"etaNs,omitempty"`
}

// Sync is the mesh's catch-up progress (not syncing off the mesh).
func (n *Node) Sync() SyncProgress {
	if s, ok := n.getMesh().(Syncer); ok {
		return s.Sync()
	}
	return SyncProgress{}
}

// Reacher is a mesh that reports how it is reached, for status.
type Reacher interface {
	Reach() Reach
}

// DialReporter is a mesh that reports how its dials fare and whom it
// refused, for status: why a node has no peers.
type DialReporter interface {
	Bootstrap() []BootstrapPeer
	Refused() []RefusedPeer
}

// BootstrapPeer is one configured bootstrap peer and how dialling it fares.
type BootstrapPeer struct {
	// Addr is the multiaddr as configured.
	Addr string `json:"addr"`
	// Connected is true while the peer is admitted (handshaken into the group).
	Connected bool `json:"connected"`
	// LastError is why the last dial or handshake failed ("" if none did):
	// a short cause such as "connection refused" or "refused: another group".
	LastError string `json:"lastError,omitempty"`
}

// RefusedPeer is a peer refused at the handshake, not dialled again until
// Until (unix ms) unless it presents a handshake that passes.
type RefusedPeer struct {
	PeerID string `json:"peerId"`
	// Reason is "group" (its handshake named another group: Group) or
	// "proof" (no valid membership proof of our private group's secret).
	Reason string `json:"reason"`
	Group  string `json:"group,omitempty"`
	Until  int64  `json:"until"`
}

// Reach is how this node is reached: what status shows.
type Reach struct {
	// Reachability is public, private or unknown; Forced when it comes
	// from the setting rather than AutoNAT.
	Reachability string `json:"reachability"`
	Forced       bool   `json:"forced"`
	// RelayService is true when this node relays for the group's members.
	RelayService bool `json:"relayService"`
	// Relays are the relays (PeerIDs) this node holds a reservation on.
	Relays []string `json:"relays"`
	// RelayReservations and RelayRefused count reservations this node's
	// relay service granted to members and refused to anyone else.
	RelayReservations int64 `json:"relayReservations"`
	RelayRefused      int64 `json:"relayRefused"`
	// HolePunchAttempts counts hole-punch tries (DCUtR makes up to three
	// per hole punch); HolePunchSuccesses and HolePunchFailures the hole
	// punches that ended with and without a direct connection.
	HolePunchAttempts  int64 `json:"holePunchAttempts"`
	HolePunchSuccesses int64 `json:"holePunchSuccesses"`
	HolePunchFailures  int64 `json:"holePunchFailures"`
	// Upgrades counts peers moved from a relayed to a direct connection.
	Upgrades int64 `json:"upgrades"`
}

// Connect dials a peer through the mesh and waits for its admission.
func (n *Node) Connect(ctx context.Context, addr string) (PeerInfo, error) {
	c, ok := n.getMesh().(Connector)
	if !ok {
		return PeerInfo{}, fmt.Errorf("%w: the node is not on the mesh", ErrUnavailable)
	}
	return c.Connect(ctx, addr)
}

// Node is a running node's core. Its methods are safe for concurrent use.
type Node struct {
	id *identity.Identity
	// ownPub and ownX are id's keys as frames carry them, encoded once:
	// every record this node publishes carries them.
	ownPub, ownX string
	group        string
	home         string
	st           *store.Store
	bus          *events.Bus
	log          *slog.Logger
	now          func() time.Time

	mu   sync.RWMutex
	mesh Mesh

	boxMu sync.Mutex
	boxes map[string]*e2e.Box // by peer X25519 public key (raw bytes as string)

	frameKeys  frameKeys  // author keys of received frames, parsed
	verifyKeys verifyKeys // author keys, decoded for signature checks

	allowUnsigned bool
	version       string
	retriever     Retriever
	rp            rankParams // rank.go
	adm           *admission
	dense         *denseIndex // nil without an encoder
	names         *nameIndex
	// trustGen counts pins a handshake replaced, so a record checked against
	// a replaced pin is not stored after the replacement (Accept).
	trustGen atomic.Uint64
	limits   Limits
	quotas   *quotas
	prune    rosterPrune
	accepted *acceptLog
	active   chan struct{} // Active

	Counters Counters
}

// Open opens the store under home and returns a node ready to serve.
func Open(opts Options) (*Node, error) {
	if opts.Identity == nil {
		return nil, errors.New("open node: no identity")
	}
	g := group.Normalize(opts.Group)
	if err := group.Validate(g); err != nil {
		return nil, fmt.Errorf("open node: %w", err)
	}
	opt.Logger(&opts.Logger)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	so := opts.StoreOptions
	so.Home = cmp.Or(so.Home, opts.Home)
	if so.Logger == nil {
		so.Logger = opts.Logger.With("component", "store")
	}
	if so.Now == nil {
		so.Now = opts.Now
	}
	opts.Limits.defaults()
	accepted, err := newAcceptLog(opts.AcceptedRing)
	if err != nil {
		return nil, fmt.Errorf("open node: %w", err)
	}
	st, err := store.Open(StoreDir(opts.Home), so)
	if err != nil {
		return nil, err
	}
	n := &Node{accepted: accepted,
		id: opts.Identity, group: g, home: opts.Home, st: st, bus: events.NewBus(),
		log: opts.Logger, now: opts.Now, boxes: map[string]*e2e.Box{}, allowUnsigned: opts.AllowUnsigned, version: opts.Version,
		retriever: opts.Retriever, rp: defaultRankParams, names: newNameIndex(), limits: opts.Limits, quotas: newQuotas(opts.Limits),
		ownPub: opts.Identity.PublicKeyB64(), ownX: opts.Identity.E2EPublicKeyDER(), active: make(chan struct{}, 1),
	}
	if err := n.pinSelf(context.Background()); err != nil {
		st.Close()
		return nil, err
	}
	if err := n.openRecall(context.Background(), opts); err != nil {
		st.Close()
		return nil, fmt.Errorf("open node: %w", err)
	}
	return n, nil
}

// pinSelf pins this node's own keys, confirmed, before anything can be
// received: no record or handshake may claim our nodeId with another key.
// A pin of our nodeId left by anyone else is replaced, and the records it
// admitted are quarantined.
func (n *Node) pinSelf(ctx context.Context) error {
	self := store.Peer{NodeID: strings.ToLower(n.id.NodeID), Ed25519: n.id.Ed25519.Public().(ed25519.PublicKey),
		X25519: n.id.X25519.PublicKey().Bytes(), Name: n.id.Name, Confirmed: true}
	_, err := n.pinAuthor(ctx, self)
	if errors.Is(err, ErrDiskFull) {
		// Started on a full disk: the pin (its last sighting) waits for
		// the next start. Nothing depends on it meanwhile: authorKeys
		// answers for this nodeId from the identity, never the roster.
		return nil
	}
	if !errors.Is(err, ErrKeyConflict) {
		if err != nil {
			return fmt.Errorf("pinning this node's own key: %w", err)
		}
		return nil
	}
	n.log.Warn("this node's nodeId was pinned to another key; restoring its own and quarantining what that key signed", "nodeId", n.id.NodeID)
	if err := n.st.DeletePeer(ctx, self.NodeID); err != nil {
		return fmt.Errorf("pinning this node's own key: %w", err)
	}
	if _, err := n.st.PutPeer(ctx, self); err != nil {
		return fmt.Errorf("pinning this node's own key: %w", err)
	}
	_, err = n.quarantineForged(ctx, self.NodeID, self.Ed25519)
	return err
}

// StoreDir is where a home keeps its badger store.
func StoreDir(home string) string { return filepath.Join(home, "store") }

// Close stops the dense encoder's worker and closes the store. Detach the
// mesh first.
func (n *Node) Close() error {
	n.closeRecall()
	return n.st.Close()
}

// AttachMesh connects the node to its group (nil detaches).
func (n *Node) AttachMesh(m Mesh) {
	n.mu.Lock()
	n.mesh = m
	n.mu.Unlock()
}

func (n *Node) getMesh() Mesh {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mesh
}

// Identity, Group and Events expose the parts adapters need.
func (n *Node) Identity() *identity.Identity { return n.id }
func (n *Node) Group() string                { return n.group }
func (n *Node) Events() *events.Bus          { return n.bus }
func (n *Node) Logger() *slog.Logger         { return n.log }

// Store is the node's store, for tests and offline tools that inspect what
// it holds. Adapters go through the node's methods, which apply its rules
// (what is surfaced, what may be served to whom); no production package
// outside node calls it.
func (n *Node) Store() *store.Store { return n.st }

// RememberInput is what an agent asks the node to author.
type RememberInput struct {
	Fields cmb.Fields
	// Parents are keys or unique key prefixes (ResolveKey).
	Parents []string
	// To is the recipient of a directed CMB: a nodeId, or the name of a
	// peer that handshook with this node (ResolvePeer).
	To string
}

// Result says what happened to a record handed to the node.
type Result struct {
	Key string `json:"key"`
	// Duplicate: the node already held a record under this key, and kept
	// it. That is the same author's record of the same content
	// (SameAuthor), or another author's (the key covers the content, not
	// the author), in which case this record is kept as an assertion
	// beside it (Asserted when newly kept); or the key was forgotten here
	// (Forgotten) and nothing was stored.
	Duplicate bool `json:"duplicate"`
	// SameAuthor is set on duplicates only (absent otherwise).
	SameAuthor *bool `json:"sameAuthor,omitempty"`
	Asserted   bool  `json:"asserted,omitempty"`
	Forgotten  bool  `json:"forgotten,omitempty"`
}

// Error kinds adapters map onto their own codes.
var (
	ErrBadRequest  = errors.New("bad request")
	ErrRejected    = errors.New("rejected")
	ErrNotFound    = errors.New("not found")
	ErrUnavailable = errors.New("unavailable")
)

// ErrDiskFull is matched by a write refused because the store's disk is
// full (a *store.DiskFullError, whose text names the path and the free
// space): reads go on, and writes resume once space is freed.
var ErrDiskFull = store.ErrDiskFull

// Remember builds and signs a record as this node, stores it durably and only
// then publishes it. A directed record is kept here in clear and travels
// sealed for its recipient.
func (n *Node) Remember(ctx context.Context, in RememberInput) (Result, error) {
	// Parents may be unique key prefixes and the recipient a peer's name,
	// as a person types them: resolved here, the one place, for every
	// adapter.
	resolved := make([]string, 0, len(in.Parents))
	for _, p := range in.Parents {
		k, err := n.ResolveKey(ctx, p)
		if err != nil {
			return Result{}, fmt.Errorf("parent: %w", err)
		}
		resolved = append(resolved, k)
	}
	parents := lineage.Dedupe(resolved)
	ancestors, missing, err := lineage.Resolve(ctx, n.st, parents)
	if err != nil {
		return Result{}, err
	}
	if len(missing) > 0 {
		return Result{}, fmt.Errorf("%w: parent %s is not held by this node, so its ancestors are unknown", ErrNotFound, missing[0])
	}
	var recipientBox *e2e.Box
	if in.To != "" {
		if in.To, err = n.ResolvePeer(ctx, in.To); err != nil {
			return Result{}, fmt.Errorf("to: %w", err)
		}
		if recipientBox, err = n.boxFor(ctx, in.To); err != nil {
			return Result{}, err
		}
	}
	rec, err := cmb.Build(cmb.Draft{
		Fields: in.Fields, Parents: parents, Ancestors: ancestors, Group: n.group,
		To: strings.ToLower(in.To), CreatedBy: n.id.NodeID, CreatedAt: n.now().UnixMilli(),
	}, n.id.Ed25519)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	res, err := n.keepAndPublish(ctx, rec, recipientBox)
	if err == nil && !res.Duplicate {
		n.Counters.Authored.Add(1)
		n.noteActive()
	}
	return res, err
}

// Publish takes a record an agent signed with its own identity: it is
// verified against pub (pinned in the roster on first sight), stored, and
// published.
func (n *Node) Publish(ctx context.Context, rec *cmb.Record, pub ed25519.PublicKey) (Result, error) {
	if rec.IsSealed() {
		return Result{}, fmt.Errorf("%w: publish the record in clear; the node seals directed records itself", ErrBadRequest)
	}
	if err := rec.Verify(cmb.Policy{Audience: cmb.Audience{Group: n.group, Self: rec.To}, AuthorKey: pub}); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	var recipientBox *e2e.Box
	if rec.To != "" {
		var err error
		if recipientBox, err = n.boxFor(ctx, rec.To); err != nil {
			return Result{}, err
		}
	}
	// A local agent is inside the socket's trust boundary: its key is confirmed.
	if _, err := n.pinAuthor(ctx, store.Peer{NodeID: rec.CreatedBy, Ed25519: pub, Confirmed: true}); err != nil {
		return Result{}, err
	}
	if missing, err := lineage.MissingParents(ctx, n.st, rec.Parents()); err != nil {
		return Result{}, err
	} else if len(missing) > 0 {
		return Result{}, fmt.Errorf("%w: parent %s is not held by this node", ErrNotFound, missing[0])
	}
	return n.keepAndPublish(ctx, rec, recipientBox)
}

// keepAndPublish stores a record authored on this machine durably and only
// then, if it is new, publishes it: a directed record is kept here in clear
// and travels sealed for its recipient (box).
func (n *Node) keepAndPublish(ctx context.Context, rec *cmb.Record, box *e2e.Box) (Result, error) {
	// The record is encoded once, for the store and for the frame.
	e := entryOf(rec)
	res, err := n.keepEntry(ctx, rec, e, store.Meta{Source: SourceLocal, Verified: true, Directed: rec.To != ""})
	if err != nil {
		return Result{}, err
	}
	// A new assertion travels like a new record: peers holding the first
	// author's keep it beside theirs.
	if res.Duplicate && !res.Asserted {
		return res, nil
	}
	out, raw := rec, e.Raw
	if box != nil {
		if out, err = e2e.SealRecord(rec, box, rand.Reader); err != nil {
			return Result{}, err
		}
		raw = nil
	}
	n.publish(ctx, out, raw)
	return res, nil
}

// publish hands rec to the mesh; raw is its encoding, or nil.
func (n *Node) publish(ctx context.Context, rec *cmb.Record, raw []byte) {
	m := n.getMesh()
	if m == nil {
		return
	}
	if err := m.Publish(ctx, rec, raw); err != nil {
		// The record is durable here; catch-up delivers it when the mesh can.
		n.log.Warn("publish failed; peers will get it on catch-up", "key", rec.Key, "err", err)
	}
}

// boxFor returns the E2E box for a recipient whose X25519 key the roster holds.
func (n *Node) boxFor(ctx context.Context, nodeID string) (*e2e.Box, error) {
	p, err := n.st.GetPeer(ctx, strings.ToLower(nodeID))
	if errors.Is(err, store.ErrNotFound) || (err == nil && len(p.X25519) == 0) {
		return nil, fmt.Errorf("%w: no encryption key is known for %s; it must have connected to this node's group first", ErrNotFound, nodeID)
	}
	if err != nil {
		return nil, err
	}
	return n.box(p.X25519)
}

func (n *Node) box(peerX25519 []byte) (*e2e.Box, error) {
	n.boxMu.Lock()
	defer n.boxMu.Unlock()
	if b, ok := n.boxes[string(peerX25519)]; ok {
		return b, nil
	}
	pub, err := e2e.ParsePublicKey(cmb.EncodeKey(peerX25519))
	if err != nil {
		return nil, fmt.Errorf("peer X25519 key: %w", err)
	}
	b, err := e2e.NewBox(n.id.X25519, pub)
	if err != nil {
		return nil, err
	}
	if len(n.boxes) > 4096 { // bound the cache; rebuilding a box is one X25519
		clear(n.boxes)
	}
	n.boxes[string(peerX25519)] = b
	return b, nil
}

// pinAuthor records an author's keys: on first sight (TOFU, DESIGN
// "Authors"), refusing a different key later, except that a confirmed key
// (a handshake's) replaces an unconfirmed pin, whose records are then
// quarantined. A sighting that adds nothing writes nothing.
func (n *Node) pinAuthor(ctx context.Context, p store.Peer) (store.PeerUpdate, error) {
	if cmb.ValidateNodeID(p.NodeID) != nil {
		// Agent-name authors (allowed by the schema) are not pinned by nodeId.
		return store.PeerUpdate{}, nil
	}
	p.NodeID = strings.ToLower(p.NodeID)
	now := n.now()
	p.FirstSeen, p.LastSeen = now, now
	up, err := n.st.PutPeer(ctx, p)
	if err == nil && up.Created {
		n.rosterAdded(ctx)
	}
	if errors.Is(err, store.ErrKeyConflict) {
		n.Counters.KeyConflicts.Add(1)
		return up, fmt.Errorf("%w: %w", ErrRejected, pinConflict{err})
	}
	if err == nil && up.NewClaimant {
		// Two keys have proved they claim one nodeId. Which is the
		// member's cannot be told from here, so neither is believed:
		// every record of the nodeId is kept but not surfaced, and new
		// ones are stored quarantined (check), until the operator picks a
		// key (Trust).
		n.trustGen.Add(1)
		n.Counters.KeyConflicts.Add(1)
		q, qerr := n.quarantineAuthor(ctx, p.NodeID, nil)
		n.log.Warn("two keys claim one nodeId; its records are quarantined until the operator picks one with `cmbnode trust NODEID KEY`",
			"nodeId", p.NodeID, "pinnedKey", cmb.EncodeKey(up.Peer.Ed25519), "claimantKey", cmb.EncodeKey(p.Ed25519), "quarantined", q)
		return up, qerr
	}
	if err != nil || up.Replaced == nil {
		return up, err
	}
	n.trustGen.Add(1)
	n.Counters.KeysReplaced.Add(1)
	q, err := n.quarantineForged(ctx, p.NodeID, p.Ed25519)
	n.log.Warn("a handshake key replaced an author key known only from gossip; records that key signed are quarantined",
		"nodeId", p.NodeID, "replacedKey", cmb.EncodeKey(up.Replaced), "key", cmb.EncodeKey(p.Ed25519), "quarantined", q)
	return up, err
}

// PinPeer records a peer's keys as its handshake presented them; the
// libp2p secure channel has proved the Ed25519 key, so the pin is
// confirmed. A key conflict with a confirmed pin wraps ErrRejected and
// ErrKeyConflict.
func (n *Node) PinPeer(ctx context.Context, nodeID string, ed ed25519.PublicKey, x []byte, name string) error {
	_, err := n.pinAuthor(ctx, store.Peer{NodeID: nodeID, Ed25519: ed, X25519: x, Name: name, Confirmed: true})
	if err == nil && name != "" {
		n.names.set(nodeID, name) // a rename counts from the next recall
	}
	return err
}

// quarantineAuthor quarantines every surfaced record of author, or, with
// keep set, those whose signature does not verify with keep.
func (n *Node) quarantineAuthor(ctx context.Context, author string, keep ed25519.PublicKey) (int, error) {
	if keep != nil {
		return n.quarantineForged(ctx, author, keep)
	}
	var keys []string
	err := n.st.Scan(ctx, store.Window{Author: author}, func(kt store.KeyTime) error {
		keys = append(keys, kt.Key)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("finding the records of %s: %w", author, err)
	}
	q, err := n.st.Quarantine(ctx, keys)
	n.Counters.Quarantined.Add(int64(q))
	return q, err
}

// quarantineForged quarantines the records of author whose signature does
// not verify with key: they were admitted under a key that turned out not
// to be the author's. It returns how many it quarantined.
func (n *Node) quarantineForged(ctx context.Context, author string, key ed25519.PublicKey) (int, error) {
	var forged []string
	err := n.st.Scan(ctx, store.Window{Author: author}, func(kt store.KeyTime) error {
		r, err := n.st.Get(ctx, kt.Key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		rec, err := cmb.Decode(r.Raw)
		if err != nil || rec.VerifySignature(key) != nil {
			forged = append(forged, kt.Key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("finding records of %s signed by a replaced key: %w", author, err)
	}
	q, err := n.st.Quarantine(ctx, forged)
	if err != nil {
		return 0, err
	}
	n.Counters.Quarantined.Add(int64(q))
	return q, nil
}

// keep stores a checked record durably, with annexes written in its own
// commit. A duplicate is answered as Result says: another author's record
// of held content is kept as an assertion (assertOther), a forgotten key
// stores nothing. A new record is queued for the dense encoder, which never
// makes this wait, and unless quarantined added to its group's near-copy
// table (nearcopy.go).
func (n *Node) keep(ctx context.Context, rec *cmb.Record, m store.Meta, annexes ...store.ItemAnnex) (Result, error) {
	return n.keepEntry(ctx, rec, entryOf(rec), m, annexes...)
}

// keepEntry is keep with rec's entry (entryOf) already made.
func (n *Node) keepEntry(ctx context.Context, rec *cmb.Record, e store.Entry, m store.Meta, annexes ...store.ItemAnnex) (Result, error) {
	rs, err := n.st.PutMany(ctx, []store.Item{{Entry: e, Meta: m, Annexes: annexes}})
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		return Result{}, fmt.Errorf("store %s: %w", rec.Key, err)
	}
	r := rs[0]
	res := Result{Key: rec.Key, Duplicate: r.Duplicate, Forgotten: r.Forgotten}
	if !r.Duplicate {
		if !m.Quarantined {
			n.adm.near.add(n.adm.hashed, rec.Key, rec.Group, rec.CreatedAt, &e.Texts)
		}
		if n.dense != nil {
			n.dense.enqueue(rec.Key)
		}
		return res, nil
	}
	if r.Forgotten {
		return res, nil
	}
	same, asserted, err := n.assertOther(ctx, rec, r.Record)
	if err != nil {
		return Result{}, err
	}
	res.SameAuthor, res.Asserted = &same, asserted
	return res, nil
}

func entryOf(rec *cmb.Record) store.Entry {
	return store.Entry{
		Key: rec.Key, CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt, Group: rec.Group, To: rec.To,
		Parents: rec.Parents(), Ancestors: rec.Ancestors(), Texts: rec.Fields.Texts(), Raw: rec.Canonical(),
	}
}
