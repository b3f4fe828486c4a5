package cgp

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/lineage/walk"
)

// attestationOverhead is a generous per-frame allowance for the
// frame_attestations entry (signature, proof path, identity).
const attestationOverhead = 2048

// Config configures an Engine. NewEngine gives every field left zero its
// value in DefaultConfig. The limits bound work per query and the size of a
// reply line, independently of what a host asks for.
type Config struct {
	Backend         Backend
	ProviderName    string // wire provider id (D5)
	ProviderVersion string
	// Group is used in URIs of records that carry no group (legacy cmb-).
	Group string
	// SigningKey, if set, makes every result carry §6.5 attestations and
	// the ack publish the key. The daemon passes the node's Ed25519 key.
	SigningKey ed25519.PrivateKey
	KeyID      string // default "ed25519:" + first 16 hex of the public key
	AttesterID string // default ProviderName
	// Now stamps issued_at (not signed); tests pin it for golden output.
	Now func() time.Time
	// MaxCandidates caps how many search hits one query examines.
	MaxCandidates int
	// MaxThread caps the members of one episode narrative. Below 2 it takes
	// the default: an episode needs the focal record and a relative.
	MaxThread int
	// MaxResultBytes caps the encoded frames of one result, well under the
	// 16 MiB line a host reads, leaving room for attestations.
	MaxResultBytes int
	// MaxAnchors caps a query's anchors (64); more is bad_request. Each
	// anchor starts a lineage walk, so the cap bounds a query's work
	// however many URIs fit in an input line.
	MaxAnchors int
	// MaxConcurrent bounds the queries and verifies running at once over
	// every binding (one per core, at least 2); the rest wait their turn
	// within their deadline.
	MaxConcurrent int
	// RequestTimeout bounds one query or verify, its wait for a turn
	// included (25 s, below the host's 30 s), whatever deadline the
	// caller's context has; a later deadline is shortened to it.
	RequestTimeout time.Duration
	Logger         *slog.Logger
	// EmbeddingsFingerprint, if set, is declared in the ack (E1), and a
	// query embedding of EmbeddingDim numbers is ranked with, through the
	// Backend's VectorSearcher; "" refuses query embeddings.
	EmbeddingsFingerprint string
	EmbeddingDim          int
}

// VectorSearcher is the optional Backend method serving query embeddings:
// Search with the query's vector in the declared kernel.
type VectorSearcher interface {
	SearchVector(ctx context.Context, text string, vec []float64, opts SearchOptions) (SearchResult, error)
}

// DefaultConfig returns the settings NewEngine uses for the fields left
// zero. Backend has no default; KeyID and AttesterID follow from the
// signing key and the provider name.
func DefaultConfig() Config {
	return Config{
		ProviderName:    "cmbnode",
		ProviderVersion: "dev",
		Now:             time.Now,
		MaxCandidates:   256,
		MaxThread:       24,
		MaxResultBytes:  12 << 20,
		MaxAnchors:      64,
		MaxConcurrent:   max(2, runtime.GOMAXPROCS(0)),
		RequestTimeout:  requestTimeout,
	}
}

// Engine answers CGP handshakes, queries and verifies over a Backend. It is
// the in-process Handler: the daemon mounts it on its HTTP binding and
// serves its socket `query`/`verify` requests with it.
type Engine struct {
	cfg    Config
	signer *Signer
	// slots holds a token per query or verify running (MaxConcurrent).
	slots chan struct{}
	stats engineStats
}

type engineStats struct {
	queries, verifies, anchorsRefused, busy, deadline, bytesTruncated atomic.Int64
}

// Stats are the engine's counters, each limit's hits among them.
type Stats struct {
	Queries  int64 // queries answered or refused
	Verifies int64
	// AnchorsRefused counts queries refused for carrying over MaxAnchors.
	AnchorsRefused int64
	// Busy counts requests whose deadline passed while they waited for a
	// turn (MaxConcurrent).
	Busy int64
	// DeadlineExceeded counts requests stopped at their deadline once
	// running.
	DeadlineExceeded int64
	// BytesTruncated counts results that left out a frame to stay within
	// their byte budget (MaxResultBytes, or the socket's message cap).
	BytesTruncated int64
}

// Stats reports the engine's counters.
func (e *Engine) Stats() Stats {
	st := &e.stats
	return Stats{
		Queries: st.queries.Load(), Verifies: st.verifies.Load(), AnchorsRefused: st.anchorsRefused.Load(),
		Busy: st.busy.Load(), DeadlineExceeded: st.deadline.Load(), BytesTruncated: st.bytesTruncated.Load(),
	}
}

// NewEngine validates cfg and fills defaults.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Backend == nil {
		return nil, errors.New("cgp: NewEngine: Backend is required")
	}
	def := DefaultConfig()
	opt.Default(&cfg.ProviderName, def.ProviderName)
	opt.Default(&cfg.ProviderVersion, def.ProviderVersion)
	if cfg.Now == nil {
		cfg.Now = def.Now
	}
	opt.Default(&cfg.MaxCandidates, def.MaxCandidates)
	if cfg.MaxThread < 2 {
		cfg.MaxThread = def.MaxThread
	}
	opt.Default(&cfg.MaxResultBytes, def.MaxResultBytes)
	opt.Default(&cfg.MaxAnchors, def.MaxAnchors)
	opt.Default(&cfg.MaxConcurrent, def.MaxConcurrent)
	opt.Default(&cfg.RequestTimeout, def.RequestTimeout)
	opt.Logger(&cfg.Logger)
	e := &Engine{cfg: cfg}
	if cfg.SigningKey != nil {
		if len(cfg.SigningKey) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("cgp: NewEngine: signing key is %d bytes, want %d", len(cfg.SigningKey), ed25519.PrivateKeySize)
		}
		pub := cfg.SigningKey.Public().(ed25519.PublicKey)
		if cfg.KeyID == "" {
			cfg.KeyID = "ed25519:" + hex.EncodeToString(pub)[:16]
		}
		if cfg.AttesterID == "" {
			cfg.AttesterID = cfg.ProviderName
		}
		e.cfg = cfg
		e.signer = &Signer{Key: cfg.SigningKey, KeyID: cfg.KeyID, AttesterID: cfg.AttesterID}
	}
	e.slots = make(chan struct{}, cfg.MaxConcurrent)
	return e, nil
}

// begin bounds one request: RequestTimeout from now, and a turn among
// MaxConcurrent. The returned done must be called once it finishes.
func (e *Engine) begin(ctx context.Context) (context.Context, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
	select {
	case e.slots <- struct{}{}:
		return ctx, func() { <-e.slots; cancel() }, nil
	default:
	}
	select {
	case e.slots <- struct{}{}:
		return ctx, func() { <-e.slots; cancel() }, nil
	case <-ctx.Done():
		cancel()
		e.stats.busy.Add(1)
		return nil, nil, Errorf(CodeUnavailable, "the provider is busy: %d requests are running and none finished in time for this one (%v); retry later", e.cfg.MaxConcurrent, context.Cause(ctx))
	}
}

// Ack is the handshake_ack the engine's capabilities justify: memory and
// episode frames, id echo, lineage graph, honest verify, no embeddings, full
// representation only, and nothing leaves the machine.
func (e *Engine) Ack() HandshakeAck {
	ack := HandshakeAck{
		Type:            TypeHandshakeAck,
		ProtocolVersion: ProtocolVersion,
		Provider: ProviderInfo{
			Name:    e.cfg.ProviderName,
			Version: e.cfg.ProviderVersion,
			// reads: queries show us what the host works on. writes: we
			// persist nothing derived from queries. egress: the query never
			// leaves the node (the store is local; recall is not remote).
			DataFlow: DataFlow{Reads: true, Writes: false, Egress: false, EgressScopes: []string{"local-only"}},
		},
		Capabilities: Capabilities{
			Query:       QueryCapability{Kinds: []string{KindMemory, KindEpisode}},
			Correlation: true,
			Graph:       true,
			Verify:      true,
		},
	}
	if e.signer != nil {
		ack.AttesterKeys = []AttesterKey{e.signer.PublicKey()}
	}
	if fp := e.cfg.EmbeddingsFingerprint; fp != "" {
		ack.Capabilities.EmbeddingsFingerprint = &fp
	}
	return ack
}

// candidate is a frame the query may return, ranked before it is built so
// only what might fit is rendered.
type candidate struct {
	rec   Record
	kind  string
	score float64
	id    string
}

// Query answers one ContextQuery. Ranking: the backend's relevance+recency
// score; with anchors, frames within one lineage hop of an anchor (which are
// anchored in the G4 sense) rank above those two hops away, which rank above
// the rest. Packing is greedy in rank order but skips a frame that would
// overflow max_tokens and keeps trying smaller ones.
func (e *Engine) Query(ctx context.Context, q *ContextQuery) (*ContextQueryResult, error) {
	return e.QueryWithin(ctx, q, e.cfg.MaxResultBytes)
}

// QueryWithin is Query with the result's frames packed within maxBytes
// (at most MaxResultBytes; 0 or less takes it), for a transport whose
// messages are smaller than a host's line: frames that would not fit are
// left out and counted, as a token budget leaves them out, so the result
// says it is truncated rather than failing.
func (e *Engine) QueryWithin(ctx context.Context, q *ContextQuery, maxBytes int) (*ContextQueryResult, error) {
	e.stats.queries.Add(1)
	if n := len(q.Anchors); n > e.cfg.MaxAnchors {
		e.stats.anchorsRefused.Add(1)
		return nil, Errorf(CodeBadRequest, "query.anchors has %d URIs; this provider takes at most %d per query", n, e.cfg.MaxAnchors)
	}
	if maxBytes <= 0 || maxBytes > e.cfg.MaxResultBytes {
		maxBytes = e.cfg.MaxResultBytes
	}
	ctx, done, err := e.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	vs, _ := e.cfg.Backend.(VectorSearcher)
	if q.Embedding != nil {
		switch {
		case e.cfg.EmbeddingsFingerprint == "" || vs == nil:
			return nil, Errorf(CodeBadRequest, "this provider declares no embeddings_fingerprint; a query embedding cannot be interpreted")
		case len(q.Embedding) != e.cfg.EmbeddingDim:
			return nil, Errorf(CodeBadRequest, "query.embedding has %d numbers; embeddings_fingerprint %s declares %d", len(q.Embedding), e.cfg.EmbeddingsFingerprint, e.cfg.EmbeddingDim)
		}
		for _, x := range q.Embedding {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, Errorf(CodeBadRequest, "query.embedding holds a number that is not finite")
			}
		}
	}
	wantMem, wantEp := len(q.Kinds) == 0, len(q.Kinds) == 0
	for _, k := range q.Kinds {
		wantMem = wantMem || k == KindMemory
		wantEp = wantEp || k == KindEpisode
	}
	res := &ContextQueryResult{Frames: []Frame{}}
	if sr, ok := e.cfg.Backend.(SyncReporter); ok {
		if n, syncing := sr.Syncing(); syncing {
			res.Sync = &n
		}
	}
	if !wantMem && !wantEp {
		// Q1: none of our kinds requested; unknown kinds are not an error.
		return res, nil
	}
	var asOf *time.Time
	if q.AsOf != nil {
		t, err := ParseTime(*q.AsOf)
		if err != nil {
			return nil, Errorf(CodeBadRequest, "query.as_of: %v", err)
		}
		asOf = &t
	}
	text := q.Goal
	if q.QueryText != nil && strings.TrimSpace(*q.QueryText) != "" {
		text = *q.QueryText
	}
	limit := min(max(2*int(min(q.MaxFrames, 1<<20)), 32), e.cfg.MaxCandidates)
	var sr SearchResult
	if q.Embedding != nil {
		sr, err = vs.SearchVector(ctx, text, q.Embedding, SearchOptions{Limit: limit, AsOf: asOf})
	} else {
		sr, err = e.cfg.Backend.Search(ctx, text, SearchOptions{Limit: limit, AsOf: asOf})
	}
	if err != nil {
		return nil, e.unavailable("search", err)
	}
	hops, unread, err := e.anchorHops(ctx, q.Anchors)
	if err != nil {
		return nil, e.unavailable("anchors", err)
	}

	base := map[string]float64{}
	var order []string
	for _, h := range sr.Hits {
		if _, dup := base[h.Key]; !dup {
			order = append(order, h.Key)
		}
		base[h.Key] = clamp01(h.Score)
	}
	for k := range hops {
		if _, ok := base[k]; !ok {
			base[k] = 0
			order = append(order, k)
		}
	}
	slices.Sort(order)

	var cands []candidate
	for _, k := range order {
		if err := ctx.Err(); err != nil {
			return nil, e.unavailable("query", err)
		}
		r, ok, err := e.cfg.Backend.Get(ctx, k)
		if err != nil {
			return nil, e.unavailable("get", err)
		}
		if !ok || (asOf != nil && !ValidAt(r, *asOf)) {
			continue
		}
		if d, near := hops[k]; r.Hidden && (!near || d > 0) {
			// Only an anchor itself is shown hidden; search hits never are.
			continue
		}
		if wantMem {
			cands = append(cands, candidate{rec: r, kind: KindMemory, id: memoryFrameID(k),
				score: rank(hops, k, base[k])})
		}
		if wantEp && (len(r.Parents) > 0 || hasChildren(ctx, e.cfg.Backend, k)) {
			// An episode ranks by its focal record's distance to the anchor:
			// within one hop the anchor is a member, so the episode is
			// anchored in the G4 sense too.
			cands = append(cands, candidate{rec: r, kind: KindEpisode, id: episodeFrameID(k, asOf),
				score: rank(hops, k, base[k])})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})

	var (
		used      uint64
		bytesUsed int
		dropped   int
		overBytes bool
		seenSets  = map[string]bool{}
	)
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return nil, e.unavailable("query", err)
		}
		var members []Record
		if c.kind == KindEpisode {
			// Threads are compared before the frame limit applies, so a
			// narrative already served under another member's id is neither
			// served again nor counted as dropped.
			members, err = e.thread(ctx, c.rec, asOf)
			if err != nil {
				return nil, e.unavailable("thread", err)
			}
			if len(members) < 2 {
				continue
			}
			set := memberSet(members)
			if seenSets[set] {
				continue
			}
			seenSets[set] = true
		}
		if len(res.Frames) >= int(q.MaxFrames) {
			dropped++
			continue
		}
		var f Frame
		if c.kind == KindEpisode {
			f = e.episodeFrameOf(c.rec, members, asOf)
		} else if f, err = e.memoryFrame(ctx, c.rec); err != nil {
			return nil, e.unavailable("render", err)
		}
		f.Score = round6(c.score)
		if used+uint64(f.TokenCost) > uint64(q.MaxTokens) {
			dropped++
			continue
		}
		enc, err := json.Marshal(f)
		if err != nil {
			return nil, fmt.Errorf("cgp: encode frame %s: %w", f.ID, err)
		}
		if bytesUsed+len(enc)+attestationOverhead > maxBytes {
			dropped++
			overBytes = true
			continue
		}
		used += uint64(f.TokenCost)
		bytesUsed += len(enc) + attestationOverhead
		res.Frames = append(res.Frames, f)
	}
	if overBytes {
		e.stats.bytesTruncated.Add(1)
	}
	// Records that matched but were never examined are candidates too, as
	// are records near an anchor the walk did not read.
	unexamined := max(sr.Total-len(sr.Hits), 0) + unread
	perRecord := 0
	if wantMem {
		perRecord++
	}
	if wantEp {
		perRecord++
	}
	if est := dropped + unexamined*perRecord; est > 0 {
		res.Truncated = true
		d := uint32(min(est, 0xFFFFFFFF))
		res.DroppedEstimate = &d
	}
	if e.signer != nil && len(res.Frames) > 0 {
		fa, ra, err := e.signer.Attest(e.cfg.ProviderName, res.Frames, FormatTime(e.cfg.Now()))
		if err != nil {
			return nil, fmt.Errorf("cgp: attest: %w", err)
		}
		res.FrameAttestations, res.ResultAttestation = fa, ra
	}
	return res, nil
}

func round6(f float64) float64 {
	return clamp01(float64(int64(f*1e6+0.5)) / 1e6)
}

// rank is the final score in [0,1]. Without anchors it is the backend's
// score. With anchors it orders by anchor tier, then base: (tier+base)/3.
func rank(hops map[string]int, key string, base float64) float64 {
	if len(hops) == 0 {
		return clamp01(base)
	}
	return clamp01((float64(hopTier(hops, key)) + clamp01(base)) / 3)
}

// hopTier is 2 for a record within one lineage hop of an anchor (its
// memory frame is anchored: its uri or a relation target equals the
// anchor), 1 at two hops, else 0.
func hopTier(hops map[string]int, key string) int {
	h, ok := hops[key]
	switch {
	case !ok:
		return 0
	case h <= 1:
		return 2
	default:
		return 1
	}
}

func memberSet(members []Record) string {
	keys := make([]string, len(members))
	for i, m := range members {
		keys[i] = m.Key
	}
	slices.Sort(keys)
	return strings.Join(keys, "\x00")
}

func hasChildren(ctx context.Context, b Backend, key string) bool {
	kids, err := b.Children(ctx, key)
	return err == nil && len(kids) > 0
}

// anchorReach is how many lineage hops from an anchor still rank higher.
const anchorReach = 2

// anchorHops resolves anchors to keys and maps each held record within
// anchorReach lineage hops (parents and children) of one to its distance
// from the nearest. as_of does not cut this walk: candidates are cut where
// they are built (ValidAt), so ranking near an anchor is unchanged by it.
// The walk reads at most MaxCandidates records, nearest first, so a
// record with thousands of remixes cannot make one query read the store;
// unread counts the records it reached and left unread.
func (e *Engine) anchorHops(ctx context.Context, anchors []string) (hops map[string]int, unread int, err error) {
	var keys []string
	for _, a := range anchors {
		if k, ok := keyFromURI(a); ok {
			keys = append(keys, k)
		}
	}
	v := newLineageView(e.cfg.Backend)
	v.limit = e.cfg.MaxCandidates
	near, err := walk.Hops(ctx, v, keys, anchorReach)
	if err != nil {
		return nil, 0, err
	}
	hops = make(map[string]int, len(near))
	for _, n := range near {
		hops[n.Key] = n.Depth
	}
	return hops, len(v.unread), nil
}

func (e *Engine) unavailable(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		e.stats.deadline.Add(1)
		return Errorf(CodeUnavailable, "%s stopped at the request's deadline (at most %s); narrow the query (fewer anchors, lower max_frames) or retry later", what, e.cfg.RequestTimeout)
	}
	if errors.Is(err, context.Canceled) {
		return Errorf(CodeUnavailable, "%s interrupted: %v", what, err)
	}
	e.cfg.Logger.Warn("cgp backend failure", "op", what, "err", err)
	return &Error{Code: CodeUnavailable, Message: "the memory store failed during " + what + "; retry later"}
}

// Verify recomputes each presented frame from the backend: valid when the
// presented digest equals what we would serve now, stale (with our current
// digest) when it differs, gone when the record is no longer held or the id
// is not one we mint. provider_id is echoed but not compared (V5): older
// hosts send their local id there.
func (e *Engine) Verify(ctx context.Context, req *VerifyRequest) (*VerifyResponse, error) {
	e.stats.verifies.Add(1)
	ctx, done, err := e.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	out := &VerifyResponse{Verdicts: make([]Verdict, 0, len(req.Frames))}
	for _, id := range req.Frames {
		if err := ctx.Err(); err != nil {
			return nil, e.unavailable("verify", err)
		}
		v := Verdict{Frame: id, Status: StatusUnknown}
		fid, ok := rawString(id.FrameID)
		if !ok {
			out.Verdicts = append(out.Verdicts, v)
			continue
		}
		cur, exists, err := e.currentDigest(ctx, fid)
		if err != nil {
			return nil, e.unavailable("verify", err)
		}
		presented, hasDigest := rawString(id.ContentDigest)
		switch {
		case !exists:
			v.Status = StatusGone
		case hasDigest && presented == cur:
			v.Status = StatusValid
		default:
			v.Status = StatusStale
			v.ReplacementDigest = strp(cur)
		}
		out.Verdicts = append(out.Verdicts, v)
	}
	return out, nil
}

// currentDigest renders the frame an id names as we would serve it now.
func (e *Engine) currentDigest(ctx context.Context, id string) (string, bool, error) {
	kind, key, asOf, ok := parseFrameID(id)
	if !ok {
		return "", false, nil
	}
	r, held, err := e.cfg.Backend.Get(ctx, key)
	if err != nil || !held {
		return "", false, err
	}
	var f Frame
	switch kind {
	case KindMemory:
		f, err = e.memoryFrame(ctx, r)
	case KindEpisode:
		if asOf != nil && !ValidAt(r, *asOf) {
			return "", false, nil
		}
		var has bool
		f, _, has, err = e.episodeFrame(ctx, r, asOf)
		if err == nil && !has {
			return "", false, nil
		}
	}
	if err != nil {
		return "", false, err
	}
	return *f.ContentDigest, true, nil
}

// AckFor returns the handshake_ack an Engine built from cfg would send,
// without needing a Backend: the stdio shim answers the handshake with it
// while the daemon (which signs with the same key) answers queries.
func AckFor(cfg Config) (HandshakeAck, error) {
	if cfg.Backend == nil {
		cfg.Backend = NewMemBackend()
	}
	e, err := NewEngine(cfg)
	if err != nil {
		return HandshakeAck{}, err
	}
	return e.Ack(), nil
}
