package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/lineage"
	"github.com/cmbnode/cmbnode/store"
)

// FieldsJSON is the seven fields as agents see them: name → {text, valence?, arousal?}.
type FieldsJSON map[string]FieldJSON

// FieldJSON is one field in FieldsJSON.
type FieldJSON struct {
	Text    string   `json:"text"`
	Valence *float64 `json:"valence,omitempty"`
	Arousal *float64 `json:"arousal,omitempty"`
}

// FieldsView renders fields for agents.
func FieldsView(f *cmb.Fields) FieldsJSON {
	out := make(FieldsJSON, cmb.NumFields)
	for i, name := range cmb.FieldNames {
		out[name] = FieldJSON{Text: f[i].Text, Valence: f[i].Valence, Arousal: f[i].Arousal}
	}
	return out
}

// RecallHit is one ranked search result.
type RecallHit struct {
	Key       string     `json:"key"`
	CreatedBy string     `json:"createdBy"`
	CreatedAt int64      `json:"createdAt"`
	Group     string     `json:"group"`
	Fields    FieldsJSON `json:"fields"`
	// Score is in [0,1]: RecallRelevanceShare of the hit's relevance
	// (rank.go: its own text relevance with its best lineage parent's
	// and child's) plus the rest of its recency. docs/recall.md says what
	// the figures mean.
	Score float64 `json:"score"`
}

// MaxRecall bounds one recall.
const MaxRecall = 1000

// RecallOptions tune RecallWith. The zero value is a recall of the
// store's default size, as of now, with no score threshold.
type RecallOptions struct {
	Limit int // 0 is the default (10)
	// MinScore leaves out hits whose Score is below it; in [0,1].
	MinScore float64
}

// Recall ranks stored records against query, up to limit of them (0 is
// the default): RecallWith without a threshold.
func (n *Node) Recall(ctx context.Context, query string, limit int) ([]RecallHit, error) {
	return n.RecallWith(ctx, query, RecallOptions{Limit: limit})
}

// RecallWith ranks held records against query by relevance, lineage and
// recency (rank.go), best first, and returns the records. Quarantined
// records are never returned.
func (n *Node) RecallWith(ctx context.Context, query string, o RecallOptions) ([]RecallHit, error) {
	if o.Limit > MaxRecall {
		return nil, fmt.Errorf("%w: limit %d is over %d", ErrBadRequest, o.Limit, MaxRecall)
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative", ErrBadRequest)
	}
	if math.IsNaN(o.MinScore) || o.MinScore < 0 || o.MinScore > 1 {
		return nil, fmt.Errorf("%w: min_score %v is not in [0,1]", ErrBadRequest, o.MinScore)
	}
	o.Limit = cmp.Or(o.Limit, 10)
	asOf := n.now()
	ranked, err := n.rank(ctx, query, o.Limit, asOf)
	if err != nil {
		return nil, err
	}
	for i := range ranked {
		r := &ranked[i]
		age := float64(max(asOf.UnixMilli()-r.createdAt, 0))
		recency := math.Exp2(-age / float64(recallHalfLife.Milliseconds()))
		r.score = RecallRelevanceShare*r.relevance + (1-RecallRelevanceShare)*recency
	}
	slices.SortFunc(ranked, func(a, b rankedKey) int { return a.compare(b) })
	out := make([]RecallHit, 0, min(len(ranked), o.Limit))
	for _, h := range ranked {
		if len(out) == o.Limit || h.score < o.MinScore {
			break
		}
		rec, err := n.record(ctx, h.key)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // purged between search and read, or quarantined
			}
			return nil, err
		}
		out = append(out, RecallHit{Key: rec.Key, CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt, Group: rec.Group, Fields: FieldsView(&rec.Fields), Score: h.score})
	}
	return out, nil
}

// Stored is a record as held, with its local metadata.
type Stored struct {
	Record   *cmb.Record
	Raw      json.RawMessage
	StoredAt time.Time
	Source   string
	Directed bool
	// KeyConfirmed is false when the author's key is known only from the
	// gossiped frames that carried its records: lower provenance.
	KeyConfirmed bool
	// Assertions are other authors' signed records of the same content
	// (same key), oldest first.
	Assertions []Assertion
}

// ErrQuarantined is wrapped (with ErrNotFound) when a record is held but
// quarantined: it was admitted under an author key a handshake replaced.
var ErrQuarantined = errors.New("quarantined")

// Get returns one held record exactly as received. A quarantined record is
// not surfaced: the error wraps ErrNotFound and ErrQuarantined.
func (n *Node) Get(ctx context.Context, key string) (*Stored, error) {
	if n.st.IsForgotten(key) {
		return nil, forgottenErr(key)
	}
	r, err := n.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: no record %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if r.Meta.Quarantined {
		return nil, fmt.Errorf("%w: record %s is %w: its author key was replaced by a handshake or is disputed", ErrNotFound, key, ErrQuarantined)
	}
	rec, err := cmb.Decode(r.Raw)
	if err != nil {
		return nil, fmt.Errorf("stored record %s does not decode: %w", key, err)
	}
	as, err := n.assertions(ctx, key)
	if err != nil {
		return nil, err
	}
	return &Stored{Record: rec, Raw: r.Raw, StoredAt: r.Meta.StoredAt, Source: r.Meta.Source, Directed: r.Meta.Directed,
		KeyConfirmed: n.KeyConfirmed(ctx, rec.CreatedBy, r.Meta.Source), Assertions: as}, nil
}

// KeyConfirmed reports whether a held record's author key came from an
// authenticated source: this node, a local agent, or a handshake.
func (n *Node) KeyConfirmed(ctx context.Context, author, source string) bool {
	if source == SourceLocal || strings.EqualFold(author, n.id.NodeID) {
		return true
	}
	if cmb.ValidateNodeID(author) != nil {
		return false // agent-name authors are vouched for only by frames
	}
	p, err := n.st.GetPeer(ctx, strings.ToLower(author))
	return err == nil && p.Confirmed
}

func (n *Node) record(ctx context.Context, key string) (*cmb.Record, error) {
	s, err := n.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.Record, nil
}

// LineageResult lists a record's relatives, nearest first.
type LineageResult struct {
	Key         string   `json:"key"`
	Ancestors   []string `json:"ancestors"`
	Descendants []string `json:"descendants"`
}

// MaxLineageDepth bounds one lineage walk.
const MaxLineageDepth = 1000

// Lineage walks up to depth hops each way (0 means MaxLineageDepth).
func (n *Node) Lineage(ctx context.Context, key string, depth int) (LineageResult, error) {
	if depth <= 0 || depth > MaxLineageDepth {
		depth = MaxLineageDepth
	}
	if n.st.IsForgotten(key) {
		return LineageResult{}, forgottenErr(key)
	}
	if ok, err := n.st.Has(ctx, key); err != nil {
		return LineageResult{}, err
	} else if !ok || n.st.IsQuarantined(key) {
		return LineageResult{}, fmt.Errorf("%w: no record %s", ErrNotFound, key)
	}
	anc, err := lineage.AncestorsOf(ctx, n.st, key, depth)
	if err != nil {
		return LineageResult{}, fmt.Errorf("ancestors of %s: %w", key, err)
	}
	desc, err := lineage.Descendants(ctx, n.st, key, depth)
	if err != nil {
		return LineageResult{}, fmt.Errorf("descendants of %s: %w", key, err)
	}
	res := LineageResult{Key: key, Ancestors: make([]string, 0, len(anc)), Descendants: make([]string, 0, len(desc))}
	for _, a := range anc {
		if !n.st.IsHidden(a.Key) {
			res.Ancestors = append(res.Ancestors, a.Key)
		}
	}
	for _, d := range desc {
		if !n.st.IsHidden(d.Key) {
			res.Descendants = append(res.Descendants, d.Key)
		}
	}
	return res, nil
}

// Storage says whether the store writes (docs/store.md, "A full disk").
type Storage struct {
	Writable bool `json:"writable"`
	DiskFull bool `json:"diskFull"`
	// ReadOnly: opened on a full disk, too full to open the store for
	// writing; once space is freed it reopens itself writable. Either way
	// writes resume by themselves.
	ReadOnly bool   `json:"readOnly,omitempty"`
	Path     string `json:"path,omitempty"`
	Free     uint64 `json:"freeBytes,omitempty"`
	Need     uint64 `json:"needBytes,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Storage reports whether the store writes.
func (n *Node) Storage() Storage {
	e := n.st.DiskState()
	if e == nil {
		return Storage{Writable: true}
	}
	return Storage{DiskFull: true, ReadOnly: e.ReadOnly, Path: e.Path, Free: e.Free, Need: e.Need, Message: e.Error()}
}

// Status describes the running node.
type Status struct {
	// Storage is whether the store writes (a full disk stops it).
	Storage Storage `json:"storage"`
	// Version is the daemon's build; ProtocolVersion the MMP version it speaks.
	Version         string   `json:"version"`
	ProtocolVersion string   `json:"protocolVersion"`
	NodeID          string   `json:"nodeId"`
	PeerID          string   `json:"peerId"`
	Name            string   `json:"name"`
	Group           string   `json:"group"`
	Addrs           []string `json:"addrs"`
	Peers           int      `json:"peers"`
	CMBs            int      `json:"cmbs"`
	PublicKey       string   `json:"publicKey"`
	// E2EPublicKey is this node's X25519 key as its handshake presents it
	// (e2ePublicKey: base64 DER), to compare with what peers show.
	E2EPublicKey string   `json:"e2ePublicKey"`
	Counters     Snapshot `json:"counters"`
	Listeners    int      `json:"listeners"`
	Dropped      int64    `json:"listenersDropped"`
	// Quarantined lists records held but not surfaced because the author
	// key they were admitted under was replaced by a handshake.
	Quarantined []string `json:"quarantined"`
	// Reach is how the node is reached (nil off the mesh).
	Reach *Reach `json:"reach,omitempty"`
	// Bootstrap and Refused say why the node has the peers it has (off the
	// mesh, nil): how its bootstrap dials fare, and whom it refused.
	Bootstrap []BootstrapPeer `json:"bootstrap,omitempty"`
	Refused   []RefusedPeer   `json:"refused,omitempty"`
	// SVAF counts the admission verdicts reached since start, by decision
	// (aligned, guarded, redundant, rejected).
	SVAF map[string]int64 `json:"svaf"`
	// Dense is the dense encoder's kernel and progress (nil without one).
	Dense *DenseStatus `json:"dense,omitempty"`
	// Sync is the catch-up in progress (nil when none is).
	Sync *SyncProgress `json:"sync,omitempty"`
}

// Status reports identity, network and counts.
func (n *Node) Status() Status {
	s := Status{
		Version: n.version, ProtocolVersion: cmb.ProtocolVersion,
		NodeID: n.id.NodeID, Name: n.id.Name, Group: n.group, Addrs: []string{},
		CMBs: n.st.Count(), PublicKey: n.id.PublicKeyB64(), E2EPublicKey: n.id.E2EPublicKeyDER(), Counters: n.Counters.Snapshot(), Storage: n.Storage(),
		Listeners: n.bus.Subscribers(), Dropped: n.bus.Dropped(), Quarantined: n.st.Quarantined(),
		SVAF: n.SVAFCounts(),
	}
	if d, ok := n.Dense(); ok {
		s.Dense = &d
	}
	if m := n.getMesh(); m != nil {
		s.PeerID = m.PeerID()
		s.Addrs = m.Addrs()
		s.Peers = len(m.Peers())
		if r, ok := m.(Reacher); ok {
			v := r.Reach()
			s.Reach = &v
		}
		if d, ok := m.(DialReporter); ok {
			s.Bootstrap, s.Refused = d.Bootstrap(), d.Refused()
		}
		if sp := n.Sync(); sp.Syncing {
			s.Sync = &sp
		}
	}
	return s
}

// Peers lists handshaken peers (none while the node runs alone), each
// address a dialable multiaddr ending in /p2p/<peerId> (what --bootstrap
// takes), with the peer's X25519 key from the roster.
func (n *Node) Peers() []PeerInfo {
	m := n.getMesh()
	if m == nil {
		return []PeerInfo{}
	}
	ps := m.Peers()
	out := make([]PeerInfo, 0, len(ps))
	for _, p := range ps {
		p.Addrs = dialable(p.Addrs, p.PeerID)
		if p.E2EPublicKey == "" {
			_, p.E2EPublicKey = n.FrameKeys(context.Background(), p.NodeID)
		}
		out = append(out, p)
	}
	return out
}

// dialable gives each address its /p2p/<peerId> component: the peerstore
// keeps transport addresses only, and a dial (or --bootstrap) needs the
// peer id to secure the connection.
func dialable(addrs []string, peerID string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if peerID != "" && !strings.Contains(a, "/p2p/") {
			a += "/p2p/" + peerID
		}
		out = append(out, a)
	}
	return out
}
