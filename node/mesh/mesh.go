// Package mesh connects a node to its group over libp2p: a host keyed by the
// node's Ed25519 identity (so the PeerID proves the MMP key), the /mmp/1.1.0
// stream protocol (handshake, heartbeat, peer-info, fetch and catch-up), one
// GossipSub topic per group whose validator runs the node's receive pipeline,
// LAN discovery by mDNS and bootstrap peers re-dialled with backoff.
//
// Nothing is lost by design (DESIGN "Nothing lost"): GossipSub is the fast
// path, a remix's missing parents are fetched by key and kept pending until
// some peer serves them, and every peer pair periodically reconciles what it
// holds for the group and pulls the difference.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
)

// ProtocolID is the libp2p stream protocol carrying length-prefixed MMP frames.
const ProtocolID = protocol.ID("/mmp/1.1.0")

// DefaultPeerTarget is how many members a node keeps connected by its own
// dials unless configured (Config.PeerTarget; peer_target in config.toml).
// Each connection costs about half a megabyte of heap at both ends
// (session, GossipSub queues, QUIC state); 32 is well above GossipSub's
// mesh degree (D_hi = 12) and leaves any two members a few hops apart in
// groups of thousands.
const DefaultPeerTarget = config.DefaultPeerTarget

// MDNSService is the DNS-SD service cmbnode nodes announce on the LAN. It is
// not SYM's _sym._tcp: libp2p peers are found by their own service.
const MDNSService = "_cmbnode-mmp._udp"

// Config configures a mesh. Only Node is required; Start gives every other
// field left zero its value in DefaultConfig.
type Config struct {
	// Node is the core the mesh feeds; its identity keys the host and its
	// group is the only group this mesh joins.
	Node *node.Node
	// Keys are the secrets of the node's private group: peers must prove
	// knowledge of them before anything is exchanged, and every CMB
	// travels sealed under them. Exactly one of Keys and Public is set.
	Keys *groupkey.Keyring
	// Public joins a name-only group, byte-compatible with plain MMP
	// nodes: anyone who knows the name is admitted and reads everything.
	Public bool
	// KeyReload is how often Keys re-reads the home for epochs added by a
	// rotation or a join (default 5 s).
	KeyReload time.Duration
	// Listen are libp2p multiaddrs (default: every interface on the swarm
	// port, DefaultPort, TCP and QUIC). A TCP or UDP port other than 0 that
	// is already taken is refused with a *PortInUseError — unless
	// ListenFallback is set, when it is replaced by a random port and a
	// WARN names it.
	Listen []string
	// ListenFallback turns a taken port into a random one instead of an
	// error (the daemon sets it when listen is the default).
	ListenFallback bool
	// Relays are members serving circuit relay v2 (full multiaddrs with
	// /p2p/): kept dialled like Bootstrap, and AutoRelay reserves a slot on
	// them while this node is not publicly reachable, so members behind
	// NATs reach it through them.
	Relays []string
	// RelayService serves circuit relay v2 to admitted members only
	// (memberACL), without limits, so relayed members run GossipSub and
	// /mmp over it. Turn it on for a member with a public address.
	RelayService bool
	// Reachability is ReachAuto (AutoNAT decides; default), ReachPublic or
	// ReachPrivate (forced: AutoNAT cannot decide in a group of three).
	Reachability string
	// NATPortMap asks the router for a port mapping (UPnP / NAT-PMP).
	NATPortMap bool
	// PeerstorePath is the file known members are kept in across restarts
	// (peerstore.go); "" keeps none.
	PeerstorePath string
	// Bootstrap are full multiaddrs (with /p2p/) dialled at start and
	// re-dialled with backoff whenever the connection drops.
	Bootstrap []string
	// MDNS announces and discovers peers on the LAN.
	MDNS bool
	// Logger receives the mesh's logs; nil discards them.
	Logger *slog.Logger
	// Version is this cmbnode build, sent in handshakes as x-cmbnode-version
	// ("" sends none).
	Version string
	// Metrics receives libp2p's own families (libp2p_*: host, swarm,
	// resource manager); nil turns them off. It must be a private registry,
	// never prometheus.DefaultRegisterer. libp2p keeps these collectors in
	// package variables, so meshes in one process share their values.
	Metrics prometheus.Registerer

	// HandshakeTimeout bounds the wait for the first frame (MMP: 10 s).
	HandshakeTimeout time.Duration
	// HeartbeatInterval and HeartbeatTimeout are MMP's 5 s / 15 s.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// CatchUpInterval is how often each peer is reconciled after the first
	// reconciliation on connect (default 60 s).
	CatchUpInterval time.Duration
	// PublishRate (records/s) and PublishBurst pace Publish: a burst beyond
	// them waits instead of overrunning GossipSub queues (default 4000/s,
	// burst 2000).
	PublishRate  float64
	PublishBurst int
	// PeerTarget is how many members this node keeps connected by its own
	// dials (default DefaultPeerTarget): members learned from peer-info,
	// announcements and the peerstore are dialled only while fewer are
	// connected, so a group is a partial mesh GossipSub spreads over
	// rather than everyone dialling everyone. Bootstrap peers, relays and
	// `connect` peers are dialled whatever the count.
	PeerTarget int
	// ConnLow and ConnHigh are the connection manager's watermarks
	// (default PeerTarget and PeerTarget×1.5; a ConnHigh not above ConnLow
	// is ConnLow×1.5): above ConnHigh, connections older than a minute are
	// trimmed to ConnLow, the least valuable first (GossipSub tags its mesh
	// peers). Bootstrap peers, relays and `connect` peers are protected.
	ConnLow, ConnHigh int
	// RetryMax caps the backoff of a bootstrap re-dial (default 60 s).
	RetryMax time.Duration
	// PendingRetryMax caps the backoff of a missing parent's fetch
	// (default 10 min); PendingTTL is how long a missing parent is sought
	// before it is left to catch-up (default 1 h); PendingPerAuthor is how
	// many missing parents one author's records may have waiting (default
	// 1,000).
	PendingRetryMax  time.Duration
	PendingTTL       time.Duration
	PendingPerAuthor int
	// ServeRate is the bytes a second of fetch and catch-up answers one
	// peer receives (default DefaultServeRate; budget.go).
	ServeRate float64

	// Set only by tests, through export_test.go. peerInfoDialHook is
	// called as each peer-info dial starts, and the function it returns
	// when that dial ends. noCatchUp turns reconciliation off, so a test
	// sees what gossip and fetch deliver on their own.
	peerInfoDialHook func(peer.AddrInfo) (done func())
	noCatchUp        bool
	// noFloodPublish publishes our records to the GossipSub mesh only
	// (measured against flood publishing by the group simulation).
	noFloodPublish bool
	// gossipParams, when set, adjusts GossipSub's router parameters from
	// go-libp2p-pubsub's defaults (mesh degree, IDONTWANT threshold),
	// for the group simulation to measure them.
	gossipParams func(*pubsub.GossipSubParams)
	// transport, when set, replaces the listen addresses and the TCP and
	// QUIC transports (a simulated network); ports are then not probed.
	transport []libp2p.Option
}

// DefaultConfig returns the settings Start uses for the fields left zero.
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen(),
		Reachability:      ReachAuto,
		HandshakeTimeout:  10 * time.Second,
		HeartbeatInterval: 5 * time.Second,
		HeartbeatTimeout:  15 * time.Second,
		CatchUpInterval:   60 * time.Second,
		PublishRate:       4000,
		PublishBurst:      2000,
		PeerTarget:        DefaultPeerTarget,
		ConnLow:           DefaultPeerTarget,
		ConnHigh:          DefaultPeerTarget * 3 / 2,
		RetryMax:          60 * time.Second,
		PendingRetryMax:   10 * time.Minute,
		PendingTTL:        time.Hour,
		PendingPerAuthor:  1000,
		KeyReload:         5 * time.Second,
		ServeRate:         DefaultServeRate,
	}
}

func (c *Config) defaults() {
	def := DefaultConfig()
	if len(c.Listen) == 0 {
		c.Listen = def.Listen
	}
	if c.Reachability == "" {
		c.Reachability = def.Reachability
	}
	opt.Logger(&c.Logger)
	opt.Default(&c.HandshakeTimeout, def.HandshakeTimeout)
	opt.Default(&c.HeartbeatInterval, def.HeartbeatInterval)
	opt.Default(&c.HeartbeatTimeout, def.HeartbeatTimeout)
	opt.Default(&c.CatchUpInterval, def.CatchUpInterval)
	opt.Default(&c.RetryMax, def.RetryMax)
	opt.Default(&c.PendingRetryMax, def.PendingRetryMax)
	opt.Default(&c.PendingTTL, def.PendingTTL)
	opt.Default(&c.PendingPerAuthor, def.PendingPerAuthor)
	opt.Default(&c.KeyReload, def.KeyReload)
	opt.Default(&c.PublishRate, def.PublishRate)
	opt.Default(&c.PublishBurst, def.PublishBurst)
	opt.Default(&c.ServeRate, def.ServeRate)
	opt.Default(&c.PeerTarget, def.PeerTarget)
	opt.Default(&c.ConnLow, c.PeerTarget)
	if c.ConnHigh <= c.ConnLow {
		c.ConnHigh = c.ConnLow + max(1, c.ConnLow/2)
	}
}

// Mesh is a running mesh. It implements node.Mesh.
type Mesh struct {
	cfg   Config
	n     *node.Node
	id    *identity.Identity
	group string
	log   *slog.Logger
	h     host.Host

	// keys is nil for a public group. wireGroup is what the handshake's
	// group field and the topic carry: the group's name when public, its
	// opaque tag (groupkey.Tag) when private, so a private group's name is
	// never on the wire and two private groups of one name never meet.
	keys      *groupkey.Keyring
	wireGroup string
	topicName string

	// gossip is GossipSub and the group topic, nil until the first peer
	// is admitted (ensureGossip); gossipMu orders its start against Close.
	gossip   atomic.Pointer[gossipSub]
	gossipMu sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mdns   mdns.Service

	mu       sync.Mutex
	peers    map[peer.ID]*peerState
	mismatch map[peer.ID]refusal // peers refused at the handshake: not re-dialled until then
	// kept are the bootstrap peers and relays keepDialled keeps connected.
	kept    []*kept
	dialing map[peer.ID]bool
	// peerInfoDialing are peers a peer-info dial is running for;
	// peerInfoSlots holds one token per such dial (see dialAdvertised).
	peerInfoDialing map[peer.ID]bool
	peerInfoSlots   chan struct{}
	peerInfoBudget  *dialBudget
	// memberDials are the peer-info and peerstore dials running, each
	// holding a place under PeerTarget (reserveMemberDial).
	memberDials int

	// admitCh is closed (and replaced) whenever a session is admitted;
	// guarded by mu.
	admitCh chan struct{}
	// staticRelays are cfg.Relays parsed; relay is our relay service (nil
	// when off); reach counts what reachability, relays and hole punching
	// do.
	staticRelays []peer.AddrInfo
	relay        *relayv2.Relay
	reach        reachState
	known        *knownPeers
	// hps is our DCUtR service (startHolePunch), nil until the first
	// peer is admitted (ensureGossip); observed are the
	// addresses peers observed for us in identify, guarded by obsMu.
	hps      atomic.Pointer[holepunch.Service]
	obsMu    sync.Mutex
	observed map[peer.ID]ma.Multiaddr

	drops   *dropTracer
	scores  peerScores
	pending *pending
	claims  *claims      // missing keys a catch-up is fetching (progress.go)
	sync    *syncTracker // catch-up progress (progress.go)
	limit   *limiter
	stats   stats

	runMu     sync.Mutex // orders goRun's wg.Add before Close's wg.Wait
	closed    bool
	closeOnce sync.Once
}

// peerState is a handshaken peer: one or more live sessions.
type peerState struct {
	info     node.PeerInfo
	sessions []*session
	catching atomic.Bool   // a catch-up with this peer is running
	budget   *rate.Limiter // paces what we serve it (budget.go); guarded by Mesh.mu
}

// Start builds the host, joins the group topic, starts discovery and
// returns once the host listens. Close stops everything it started.
func Start(ctx context.Context, cfg Config) (*Mesh, error) {
	if cfg.Node == nil {
		return nil, errors.New("start mesh: no node")
	}
	cfg.defaults()
	n := cfg.Node
	id := n.Identity()
	grp := group.Normalize(n.Group())
	switch {
	case cfg.Keys == nil && !cfg.Public:
		return nil, fmt.Errorf("start mesh: group %s has no secret (a name-only group must be asked for as public)", grp)
	case cfg.Keys != nil && cfg.Public:
		return nil, fmt.Errorf("start mesh: group %s is both public and private", grp)
	case cfg.Keys != nil && cfg.Keys.Name() != grp:
		return nil, fmt.Errorf("start mesh: the secret is for group %s, the node is in group %s", cfg.Keys.Name(), grp)
	}
	switch cfg.Reachability {
	case ReachAuto, ReachPublic, ReachPrivate:
	default:
		return nil, fmt.Errorf("start mesh: reachability %q: use auto, public or private", cfg.Reachability)
	}
	if cfg.transport == nil {
		listen, err := checkPorts(cfg.Listen, cfg.ListenFallback, cfg.Logger)
		if err != nil {
			return nil, err
		}
		cfg.Listen = listen
	}
	wire := grp
	if cfg.Keys != nil {
		wire = cfg.Keys.Tag()
	}
	m := &Mesh{
		cfg: cfg, n: n, id: id, group: grp, keys: cfg.Keys, wireGroup: wire, topicName: group.Topic(wire),
		log:             cfg.Logger.With("component", "mesh"),
		peers:           map[peer.ID]*peerState{},
		mismatch:        map[peer.ID]refusal{},
		dialing:         map[peer.ID]bool{},
		peerInfoDialing: map[peer.ID]bool{},
		peerInfoSlots:   make(chan struct{}, peerInfoSlots),
		peerInfoBudget:  newDialBudget(),
		admitCh:         make(chan struct{}),
		observed:        map[peer.ID]ma.Multiaddr{},
		limit:           newLimiter(cfg.PublishRate, cfg.PublishBurst),
	}
	// The mesh outlives the caller's start-up context; Close ends it.
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.pending = newPending(m)
	m.claims, m.sync = newClaims(), newSyncTracker(m)

	for _, a := range cfg.Relays {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			m.cancel()
			return nil, fmt.Errorf("start mesh: relay %q: %w (want a multiaddr ending in /p2p/<peerId>)", a, err)
		}
		m.staticRelays = append(m.staticRelays, *ai)
	}
	if cfg.PeerstorePath != "" {
		m.known = loadKnown(cfg.PeerstorePath, m.log)
	}
	h, err := m.newHost(id)
	if err != nil {
		m.cancel()
		return nil, err
	}
	m.h = h
	if cfg.RelayService {
		if err := m.startRelay(); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.goRun(m.watchObserved)
	m.goRun(m.watchReachability)
	h.SetStreamHandler(ProtocolID, m.handleStream)
	h.Network().Notify(&network.NotifyBundle{ConnectedF: m.onConnected})

	m.drops = &dropTracer{m: m, drops: map[string]int64{}, mesh: map[peer.ID]struct{}{}}
	m.goRun(m.pending.run)
	m.goRun(m.catchUpLoop)
	if m.keys != nil {
		m.goRun(m.watchKeys)
	}
	kept := map[peer.ID]bool{}
	for _, a := range cfg.Bootstrap {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("start mesh: bootstrap %q: %w (want a multiaddr ending in /p2p/<peerId>)", a, err)
		}
		if ai.ID == h.ID() || kept[ai.ID] {
			continue
		}
		kept[ai.ID] = true
		m.keepDialling(*ai, a, "bootstrap")
	}
	for i, ai := range m.staticRelays {
		if ai.ID == h.ID() || kept[ai.ID] {
			continue
		}
		kept[ai.ID] = true
		m.keepDialling(ai, cfg.Relays[i], "relay")
	}
	if m.known != nil {
		for _, ai := range m.known.addrInfos() {
			if ai.ID == h.ID() || kept[ai.ID] {
				continue
			}
			m.goRun(func(ctx context.Context) { m.redialKnown(ctx, ai) })
		}
		m.goRun(m.saveKnownLoop)
	}
	if cfg.MDNS {
		m.mdns = mdns.NewMdnsService(h, MDNSService, mdnsNotifee{m})
		if err := m.mdns.Start(); err != nil {
			m.Close()
			return nil, fmt.Errorf("start mesh: mdns: %w", err)
		}
	}
	m.log.Info("mesh started", "peerId", h.ID().String(), "group", m.group, "private", m.keys != nil, "addrs", m.Addrs(),
		"relayService", cfg.RelayService, "relays", len(m.staticRelays), "reachability", cfg.Reachability)
	return m, nil
}

// keepDialling starts keepDialled for ai, configured as addr.
func (m *Mesh) keepDialling(ai peer.AddrInfo, addr, kind string) {
	k := &kept{addr: addr, id: ai.ID, kind: kind}
	m.h.ConnManager().Protect(ai.ID, protectKept)
	m.mu.Lock()
	m.kept = append(m.kept, k)
	m.mu.Unlock()
	m.goRun(func(ctx context.Context) { m.keepDialled(ctx, ai, k) })
}

// newHost builds the libp2p host. Limits (documented for operators):
//   - connection manager: trims to ConnLow when over ConnHigh, 1 min grace;
//     bootstrap peers, relays and `connect` peers are protected, other
//     members only tagged (memberTag);
//   - resource manager: libp2p's auto-scaled defaults, capped at 1024
//     connections (512 in, 512 out) system-wide; /mmp/1.1.0 is limited to
//     1024 streams overall and 8 per peer (cmbnode opens one, a both-dial
//     race two, the rest is headroom for redials).
//
// Reach (reach.go): the relay transport is on, so circuit addresses can be
// dialled and accepted; AutoRelay reserves on the static relays
// (cfg.Relays) while we are not public; AutoNAT v2 probes reachability
// unless the setting forces it. Hole punching runs beside the host
// (startHolePunch).
func (m *Mesh) newHost(id *identity.Identity) (host.Host, error) {
	cfg := m.cfg
	priv, err := crypto.UnmarshalEd25519PrivateKey(id.Ed25519)
	if err != nil {
		return nil, fmt.Errorf("start mesh: host key from identity: %w", err)
	}
	cm, err := connmgr.NewConnManager(cfg.ConnLow, cfg.ConnHigh, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("start mesh: connection manager: %w", err)
	}
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	limits := rcmgr.PartialLimitConfig{
		System: rcmgr.ResourceLimits{Conns: 1024, ConnsInbound: 512, ConnsOutbound: 512},
		Protocol: map[protocol.ID]rcmgr.ResourceLimits{
			ProtocolID: {Streams: 1024, StreamsInbound: 1024, StreamsOutbound: 1024},
		},
		ProtocolPeer: map[protocol.ID]rcmgr.ResourceLimits{
			ProtocolID: {Streams: 8, StreamsInbound: 8, StreamsOutbound: 8},
		},
	}.Build(scaling.AutoScale())
	var rmOpts []rcmgr.Option
	metricsOpt := libp2p.DisableMetrics()
	if cfg.Metrics != nil {
		rcmgr.MustRegisterWith(cfg.Metrics)
		str, err := rcmgr.NewStatsTraceReporter()
		if err != nil {
			return nil, fmt.Errorf("start mesh: resource manager metrics: %w", err)
		}
		rmOpts = append(rmOpts, rcmgr.WithTraceReporter(str))
		metricsOpt = libp2p.PrometheusRegisterer(cfg.Metrics)
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits), rmOpts...)
	if err != nil {
		return nil, fmt.Errorf("start mesh: resource manager: %w", err)
	}
	var listen []ma.Multiaddr
	for _, s := range cfg.Listen {
		if a, err := ma.NewMultiaddr(s); err == nil {
			listen = append(listen, a)
		}
	}
	transport := cfg.transport
	if transport == nil {
		transport = []libp2p.Option{
			libp2p.ListenAddrStrings(cfg.Listen...),
			libp2p.Transport(tcp.NewTCPTransport),
			libp2p.Transport(libp2pquic.NewTransport),
		}
	}
	opts := append([]libp2p.Option{
		libp2p.Identity(priv),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ConnectionManager(cm),
		libp2p.ResourceManager(rm),
		libp2p.EnableRelay(),
		libp2p.EnableAutoNATv2(),
		libp2p.SwarmOpts(swarm.WithDialRanker(natDialRanker(listen))),
		// Without a registerer libp2p would register in the process-global
		// Prometheus registry, so its metrics are off unless given one.
		metricsOpt,
	}, transport...)
	if len(m.staticRelays) > 0 {
		opts = append(opts, libp2p.EnableAutoRelayWithStaticRelays(m.staticRelays,
			// Static relays cost nothing to ask again: a relay that came
			// back is used within relayPoll, not libp2p's 30 s.
			autorelay.WithBackoff(relayBackoff), autorelay.WithBootDelay(0), autorelay.WithMinInterval(relayPoll)))
	}
	switch cfg.Reachability {
	case ReachPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	if cfg.NATPortMap {
		opts = append(opts, libp2p.NATPortMap())
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("start mesh: libp2p host on %v: %w", cfg.Listen, err)
	}
	return h, nil
}

// goRun runs f on a goroutine Close waits for, and reports whether it did:
// once the mesh is closing, f is not run.
func (m *Mesh) goRun(f func(ctx context.Context)) bool {
	if !m.track() {
		return false
	}
	go func() {
		defer m.wg.Done()
		f(m.ctx)
	}()
	return true
}

// track counts work that Close waits for (m.wg; the caller calls Done),
// unless the mesh is closing.
func (m *Mesh) track() bool {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

// Close stops discovery, gossip, sessions and the host, and waits for every
// goroutine the mesh started. Detach it from the node first.
func (m *Mesh) Close() error {
	var err error
	m.closeOnce.Do(func() {
		if m.mdns != nil {
			m.mdns.Close()
		}
		m.runMu.Lock()
		m.closed = true
		m.runMu.Unlock()
		m.cancel()
		if m.relay != nil {
			m.relay.Close()
		}
		m.stopGossip()
		if m.h != nil {
			err = m.h.Close()
		}
		m.wg.Wait()
		if m.known != nil {
			if serr := m.known.save(); serr != nil {
				m.log.Warn("could not save the peerstore", "file", m.cfg.PeerstorePath, "err", serr)
			}
		}
	})
	return err
}

// Host exposes the libp2p host (tests, diagnostics).
func (m *Mesh) Host() host.Host { return m.h }

// PeerID is this node's libp2p peer id.
func (m *Mesh) PeerID() string { return m.h.ID().String() }

// Addrs are the full listen multiaddrs, each ending in /p2p/<peerId>.
func (m *Mesh) Addrs() []string {
	p2p, err := ma.NewComponent("p2p", m.h.ID().String())
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range m.h.Addrs() {
		out = append(out, a.Encapsulate(p2p.Multiaddr()).String())
	}
	slices.Sort(out)
	return out
}

// Peers lists handshaken peers of the group, ordered by nodeId.
func (m *Mesh) Peers() []node.PeerInfo {
	m.mu.Lock()
	out := make([]node.PeerInfo, 0, len(m.peers))
	for pid, ps := range m.peers {
		pi := ps.info
		pi.Addrs = nil
		for _, a := range m.h.Peerstore().Addrs(pid) {
			pi.Addrs = append(pi.Addrs, a.String())
		}
		slices.Sort(pi.Addrs)
		pi.Conn = m.connKind(pid)
		out = append(out, pi)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b node.PeerInfo) int {
		if a.NodeID < b.NodeID {
			return -1
		}
		if a.NodeID > b.NodeID {
			return 1
		}
		return 0
	})
	return out
}

// PeerCount is the number of handshaken peers.
func (m *Mesh) PeerCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.peers)
}

// admitted reports whether pid is a handshaken peer of our group — in a
// private group, one whose membership proof verified: the GossipSub peer
// filter and the validator's first check.
func (m *Mesh) admitted(pid peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.peers[pid]
	return ok
}

// sessionFor returns one live session with pid, or nil.
func (m *Mesh) sessionFor(pid peer.ID) *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ps, ok := m.peers[pid]; ok && len(ps.sessions) > 0 {
		return ps.sessions[0]
	}
	return nil
}

// sessions returns one live session per handshaken peer, preferring first.
func (m *Mesh) sessions(first peer.ID) []*session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*session, 0, len(m.peers))
	for pid, ps := range m.peers {
		if len(ps.sessions) == 0 {
			continue
		}
		if pid == first {
			out = append([]*session{ps.sessions[0]}, out...)
		} else {
			out = append(out, ps.sessions[0])
		}
	}
	return out
}
