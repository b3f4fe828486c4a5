package mesh

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/logx"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/groupkey"
)

// Queue sizes. GossipSub drops silently when a queue is full, so each is
// sized for a burst of several thousand records; whatever still drops is
// recovered by catch-up.
const (
	validateQueue = 8192 // messages waiting for a validation worker
	// validateWorkers are GossipSub's validation goroutines, each running
	// the validator inline: the validations in flight, each of which may
	// wait for its record's group commit; beyond them messages queue.
	validateWorkers = 64
	outboundQueue   = 8192 // per-peer RPCs waiting to be written
	// unadmittedScore keeps a peer that has not handshaken into our group
	// below the gossip and publish thresholds, above the graylist.
	unadmittedScore = -600
	// Score thresholds. Below gossipThreshold no IHAVE/IWANT is exchanged
	// with a peer, below publishThreshold our flood publish skips it, below
	// graylistThreshold every RPC it sends is dropped unread.
	gossipThreshold   = -100
	publishThreshold  = -500
	graylistThreshold = -1000
	// scoreInterval is how often GossipSub's scorer decays the counters
	// (DecayInterval) and how often the scores shown in Stats are
	// refreshed: one wake-up of the scorer each. Decisions use live
	// scores, so a faulty peer sinks as fast whatever it is; only a
	// score's recovery moves in these steps. pubsub's default, 1 s, woke
	// an idle daemon every second for nothing.
	scoreInterval = 5 * time.Second
	// scoreDecayToZero is where a decaying counter counts as zero
	// (pubsub's default).
	scoreDecayToZero = 0.01
	// invalidWeight scores a peer -10·n² for n records of its rejected on the
	// topic (n decaying): 4 put it below the gossip threshold, 8 below the
	// publish threshold, 11 below the graylist. A single rejection already
	// makes the score negative, which prunes the peer from our mesh.
	invalidWeight = -10
	// invalidDecay is how long until a rejection is forgotten (its count
	// decays to 1%); the count halves every 90 s, so a graylisted peer that
	// stops is heard again within minutes (from n = 20 after about 80 s).
	invalidDecay = 10 * time.Minute
	// scoreRetain keeps a disconnected peer's score, so a graylisted peer
	// cannot reset it by reconnecting.
	scoreRetain = invalidDecay
)

// topicScoreParams scores the group topic on invalid messages (P4) alone.
// The other components stay off on purpose:
//   - P1 time in mesh and P2 first deliveries only ever add, and a positive
//     score buys nothing here (admission is the handshake); it would let a
//     member bank credit by relaying honest traffic and spend it on forgeries;
//   - P3/P3b mesh delivery deficits punish a mesh peer that delivers less
//     than a threshold — in a small or quiet group every honest peer does,
//     and would be pruned and graylisted for silence.
func topicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		SkipAtomicValidation: true,
		TopicWeight:          1,
		// P1 is off by its zero weight, but GossipSub divides by the quantum
		// for every mesh peer whatever the weight: zero would panic.
		TimeInMeshQuantum:              time.Second,
		InvalidMessageDeliveriesWeight: invalidWeight,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecayWithBase(invalidDecay, scoreInterval, scoreDecayToZero),
	}
}

// gossipParams are GossipSub's router parameters: go-libp2p-pubsub's
// defaults (D = 6, heartbeat 1 s, IDONTWANT for messages of 1 KiB and
// more); docs/mesh.md's group figures are why they are kept.
func (m *Mesh) gossipParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	if m.cfg.gossipParams != nil {
		m.cfg.gossipParams(&p)
	}
	return p
}

// gossipSub is GossipSub running with the group topic joined and relayed.
type gossipSub struct {
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	// unrelay ends the relaying of topic.
	unrelay pubsub.RelayCancelFunc
	// events are the topic's peer events (watchSubscriptions);
	// resubscribing holds the peers a resubscribe runs for.
	events        *pubsub.TopicEventHandler
	resubscribing sync.Map
}

// ensureGossip starts GossipSub and joins the group topic unless they
// run, and hole punching (startHolePunch). The mesh calls it as the first
// peer is admitted, before that peer counts as admitted: until then
// nothing could be gossiped (the peer filter and the validator take
// admitted peers only), and GossipSub's heartbeat, scorer and event loop
// would wake an idle daemon several times a second for nothing. A record
// published before has been stored and reaches each peer by the catch-up
// that follows its admission.
//
// Peers already connected are picked up by GossipSub as it starts, and
// a peer's GossipSub learns of our topic protocols from identify's push
// once they are registered here.
func (m *Mesh) ensureGossip() error {
	if m.gossip.Load() != nil {
		return nil
	}
	m.gossipMu.Lock()
	defer m.gossipMu.Unlock()
	if m.gossip.Load() != nil {
		return nil
	}
	if m.ctx.Err() != nil {
		return fmt.Errorf("start gossip: %w", m.ctx.Err())
	}
	if m.hps.Load() == nil {
		hps, err := m.startHolePunch()
		if err != nil {
			return err
		}
		m.hps.Store(hps)
	}
	g, err := m.startGossip()
	if err != nil {
		return err
	}
	m.gossip.Store(g)
	m.log.Debug("gossip started", "topic", m.topicName)
	return nil
}

// stopGossip stops hole punching and leaves the topic (Close, after
// cancelling the mesh's context, which ends GossipSub itself).
func (m *Mesh) stopGossip() {
	m.gossipMu.Lock()
	defer m.gossipMu.Unlock()
	if hps := m.hps.Load(); hps != nil {
		hps.Close()
	}
	if g := m.gossip.Load(); g != nil {
		g.events.Cancel()
		g.unrelay()
		g.topic.Close()
	}
}

func (m *Mesh) startGossip() (*gossipSub, error) {
	// A private group's topic is named by its tag, not its name.
	topicName := m.topicName
	ps, err := pubsub.NewGossipSub(m.ctx, gossipHost{Host: m.h, m: m},
		// The CMB carries its own signature; the pubsub envelope carries none
		// and names no author (DESIGN "Wire").
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign),
		pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(func(pm *pb.Message) string {
			sum := sha256.Sum256(pm.GetData())
			return string(sum[:])
		}),
		// Only handshaken peers of our group take part in our topic: they are
		// grafted into the mesh, receive gossip and are served IWANTs.
		pubsub.WithPeerFilter(func(pid peer.ID, topic string) bool {
			return topic == topicName && m.admitted(pid)
		}),
		// Our own records go straight to every admitted subscriber (flood
		// publish), so a record published before the GossipSub mesh formed
		// is not left to gossip. Flood publishing skips peers scoring below
		// the publish threshold. Two score components are in use: the
		// application one puts unadmitted peers below it (but above the
		// graylist, so their subscriptions are still heard), and the topic's
		// invalid-message one sinks a member whose records we reject.
		pubsub.WithFloodPublish(!m.cfg.noFloodPublish),
		pubsub.WithGossipSubParams(m.gossipParams()),
		pubsub.WithPeerScore(&pubsub.PeerScoreParams{
			SkipAtomicValidation: true,
			Topics:               map[string]*pubsub.TopicScoreParams{topicName: topicScoreParams()},
			RetainScore:          scoreRetain,
			AppSpecificScore: func(pid peer.ID) float64 {
				if m.admitted(pid) {
					return 0
				}
				return unadmittedScore
			},
			AppSpecificWeight: 1,
			DecayInterval:     scoreInterval,
			DecayToZero:       scoreDecayToZero,
		}, &pubsub.PeerScoreThresholds{
			SkipAtomicValidation: true,
			GossipThreshold:      gossipThreshold,
			PublishThreshold:     publishThreshold,
			GraylistThreshold:    graylistThreshold,
		}),
		// Must follow WithPeerScore, which creates the scorer it inspects.
		pubsub.WithPeerScoreInspect(pubsub.PeerScoreInspectFn(m.scores.set), scoreInterval),
		pubsub.WithValidateQueueSize(validateQueue),
		pubsub.WithValidateWorkers(validateWorkers),
		pubsub.WithPeerOutboundQueueSize(outboundQueue),
		pubsub.WithMaxMessageSize(cmb.MaxFrameSize+groupkey.Overhead+64<<10),
		// pubsub warns per message about things that are routine under
		// load (a delivery tag not bumped while the connection manager's
		// queue is full), so its lines go through logx.Quiet.
		pubsub.WithLogger(pubsubLogger(m.log)),
		pubsub.WithRawTracer(m.drops),
	)
	if err != nil {
		return nil, fmt.Errorf("start gossip: %w", err)
	}
	if err := ps.RegisterTopicValidator(topicName, m.validate, pubsub.WithValidatorInline(true)); err != nil {
		return nil, fmt.Errorf("start gossip: validator: %w", err)
	}
	topic, err := ps.Join(topicName)
	if err != nil {
		return nil, fmt.Errorf("start gossip: join %s: %w", topicName, err)
	}
	// The validator stores what it accepts, so the topic is relayed rather
	// than subscribed: a subscription would hand every record on through
	// two more goroutines only to be dropped. Relaying announces the topic
	// and joins its mesh as a subscription does.
	unrelay, err := topic.Relay()
	if err != nil {
		topic.Close()
		return nil, fmt.Errorf("start gossip: relay %s: %w", topicName, err)
	}
	events, err := topic.EventHandler()
	if err != nil {
		unrelay()
		topic.Close()
		return nil, fmt.Errorf("start gossip: peer events of %s: %w", topicName, err)
	}
	g := &gossipSub{ps: ps, topic: topic, unrelay: unrelay, events: events}
	m.goRun(func(ctx context.Context) { m.watchSubscriptions(ctx, g, events) })
	return g, nil
}

// validate is the topic validator: size, in a private group opening the
// envelope, decode, then the node's receive pipeline (group, author key and
// pin, decryption, address, signature, audience, dedup), and a record that
// passes is stored (node.Accept) before the message is accepted. Invalid
// messages are rejected — not merely ignored — so GossipSub neither
// forwards them nor keeps them in its cache.
//
// Storing here, rather than handing the record on to store workers, spares
// each record two goroutine hand-offs. The validator runs inline on
// GossipSub's validation workers (validateWorkers), not on a goroutine
// started per message, which would be one more hand-off per record;
// records the workers store at once share the store's group commit. A
// record is relayed once it is durable here.
//
// A private group's message is a groupkey envelope (KindGossip) around the
// cmb frame, sealed with a random nonce: the same record published twice
// gives two messages (as it does in clear, the frame's timestamp differing),
// while a relay forwards the bytes it received, so GossipSub's id — SHA-256
// of those bytes — still dedupes each message across the mesh, and the
// node dedupes records by key (c.Duplicate).
func (m *Mesh) validate(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	growStack(0)
	if from == m.h.ID() {
		return pubsub.ValidationAccept // our own publish, stored before it was sent
	}
	nodeID, peerID, ok := m.admittedAs(from)
	if !ok {
		// Not (yet) handshaken into our group: ignore without penalty; if it
		// is one of ours, catch-up delivers the record once it is.
		m.stats.gossipUnadmitted.Add(1)
		return pubsub.ValidationIgnore
	}
	data := msg.GetData()
	limit := cmb.MaxFrameSize
	if m.keys != nil {
		limit += groupkey.Overhead
	}
	if len(data) > limit {
		m.n.Counters.Received.Add(1)
		m.n.Counters.CountReject("too-large")
		return pubsub.ValidationReject
	}
	if m.keys != nil {
		plain, _, err := m.keys.Open(groupkey.KindGossip, "", data)
		switch {
		case errors.Is(err, groupkey.ErrUnknownEpoch), errors.Is(err, groupkey.ErrEpochExpired):
			// Sealed under a secret we lack (a rotation not yet joined
			// here) or one past its grace (forwarded from a cache): no
			// fault of the sender; catch-up at the session's epoch
			// delivers what we may have.
			m.n.Counters.Received.Add(1)
			m.n.Counters.CountReject("group-epoch")
			return pubsub.ValidationIgnore
		case err != nil:
			m.n.Counters.Received.Add(1)
			m.n.Counters.CountReject("bad-envelope")
			return pubsub.ValidationReject
		}
		data = plain
	}
	f, err := cmb.ParseFrame(data)
	cf, ok := f.(*cmb.CMBFrame)
	if err != nil || !ok {
		m.n.Counters.Received.Add(1)
		m.n.Counters.CountReject("bad-frame")
		return pubsub.ValidationReject
	}
	c, err := m.n.Check(ctx, cf.CMB, node.Source{
		PeerID: peerID, NodeID: nodeID, AuthorKey: cf.PublicKey, AuthorE2E: cf.E2EPublicKey, Via: node.SourceGossip,
	})
	switch {
	case errors.Is(err, node.ErrNotForUs):
		m.n.Counters.Relayed.Add(1)
		return pubsub.ValidationAccept // relay, never store
	case err != nil:
		if isRejection(err) {
			m.log.Debug("gossip record rejected", "peer", from, "err", err)
			if node.IsLocalVerdict(err) {
				// Not forwarded, but no penalty: an honest relay whose
				// roster or lineage differs from ours may have sent it.
				return pubsub.ValidationIgnore
			}
			return pubsub.ValidationReject
		}
		m.log.Warn("gossip record not checked", "peer", from, "err", err)
		return pubsub.ValidationIgnore
	case c.Duplicate:
		m.n.Counters.Duplicates.Add(1)
		return pubsub.ValidationIgnore
	}
	if !m.track() {
		return pubsub.ValidationIgnore // closing: catch-up delivers it later
	}
	defer m.wg.Done()
	// A record valid here is relayed even if storing it failed: the store's
	// trouble is no fault of the record (accept logs it).
	m.accept(ctx, c, 0)
	return pubsub.ValidationAccept
}

// validatorStack is about the stack the receive pipeline needs below
// validate (Ed25519 verification and SVAF's judgement have large frames).
const validatorStack = 16 << 10

// growStack gives the calling goroutine room for validatorStack at once.
// A validation worker's stack starts small, and the runtime may shrink it
// again at a collection; grown on demand, it is doubled and copied several
// times deep in the pipeline, each copy walking and adjusting every frame
// above it. Grown here, at the top, it is copied once, with few frames.
//
//go:noinline
func growStack(i int) byte {
	var pad [validatorStack]byte
	return pad[i%len(pad)]
}

// isRejection tells a verdict on the record from a local failure.
func isRejection(err error) bool {
	return cmb.ReasonOf(err) != "" || errors.Is(err, node.ErrRejected)
}

// admittedAs is the nodeId and the peer ID (as a string) of pid if it is
// admitted: one look-up per gossiped message, and no base58 encoding.
func (m *Mesh) admittedAs(pid peer.ID) (nodeID, peerID string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps, ok := m.peers[pid]
	if !ok {
		return "", "", false
	}
	return ps.info.NodeID, ps.info.PeerID, true
}

// accept stores a checked record and queues its missing parents for fetch.
// The record is stored at once — it verified on its own — and its lineage
// fills in as parents arrive. It reports whether the record was new.
func (m *Mesh) accept(ctx context.Context, c *node.Checked, depth int) bool {
	dup, err := m.n.Accept(ctx, c)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("storing a received record failed; catch-up will retry", "key", c.Record.Key, "err", err)
		}
		return false
	}
	if len(c.MissingParents) > 0 {
		hint, _ := peer.Decode(c.Source.PeerID)
		m.pending.add(c.MissingParents, c.Record.CreatedBy, hint, depth+1)
	}
	return !dup
}

// Publish broadcasts a stored record on the group topic, paced by the
// publish limiter (waiting, never dropping). The frame carries the author's
// keys so members that never met the author can verify it, and raw (the
// record's encoding) when given. Before any peer was admitted there is no
// topic and nobody to send to: the record, already stored, reaches each
// peer by the catch-up of its admission (ensureGossip).
func (m *Mesh) Publish(ctx context.Context, rec *cmb.Record, raw []byte) error {
	g := m.gossip.Load()
	if g == nil {
		return nil
	}
	if err := m.limit.wait(ctx); err != nil {
		return fmt.Errorf("publish %s: %w", rec.Key, err)
	}
	f := &cmb.CMBFrame{Timestamp: time.Now().UnixMilli(), CMB: rec, RawCMB: raw}
	f.PublicKey, f.E2EPublicKey = m.n.FrameKeys(ctx, rec.CreatedBy)
	if rec.To != "" {
		f.To, f.Directed = rec.To, true
	}
	payload, err := cmb.MarshalFrame(f)
	if err != nil {
		return err
	}
	if len(payload) > cmb.MaxFrameSize {
		return fmt.Errorf("publish %s: %d-byte frame exceeds the %d-byte cap", rec.Key, len(payload), cmb.MaxFrameSize)
	}
	if m.keys != nil {
		if payload, err = m.keys.Seal(groupkey.KindGossip, "", payload); err != nil {
			return fmt.Errorf("publish %s: sealing for the group: %w", rec.Key, err)
		}
	}
	if err := g.topic.Publish(ctx, payload); err != nil {
		return fmt.Errorf("publish %s: %w", rec.Key, err)
	}
	m.stats.published.Add(1)
	return nil
}

// limiter is a token bucket whose callers queue (tokens go negative) and
// sleep their turn, so a burst is paced rather than dropped.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

func (l *limiter) wait(ctx context.Context) error {
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	l.tokens--
	var d time.Duration
	if l.tokens < 0 {
		d = time.Duration(-l.tokens / l.rate * float64(time.Second))
	}
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pubsubNoise are messages of go-libp2p-pubsub that are routine for this
// daemon, however pubsub rates them: they are logged at DEBUG.
var pubsubNoise = []string{
	"error bumping delivery tag", // tag tracer: the connection manager's tag queue is full
}

// pubsubLogger is the logger handed to pubsub: its noise demoted to DEBUG
// and any message repeated past a burst a minute held back and counted.
func pubsubLogger(l *slog.Logger) *slog.Logger {
	return slog.New(logx.Quiet(l.With("component", "pubsub").Handler(), logx.QuietOptions{Demote: pubsubNoise}))
}
