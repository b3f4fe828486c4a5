package mesh_test

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"

	"github.com/cmbnode/cmbnode/node/mesh"
	"github.com/cmbnode/cmbnode/store"
)

// simGroup is a private group of real members (node.Node over a badger
// store, node/mesh over a libp2p host) on go-libp2p's simulated network:
// QUIC over simnet links with per-pair latency, inside a testing/synctest
// bubble, so time only moves when every goroutine waits and the
// latencies are exact whatever the load on the machine.
type simGroup struct {
	t   testing.TB
	net *simnet.Simnet
	ms  []*member
	rng *rand.Rand
	// addrs counts the simulated IPs handed out: a member restarted gets a
	// fresh one, as a laptop back on another network would.
	addrs int
	// link is the bandwidth of each member's up and down link; slow is
	// the one given to every slowEvery-th address (0: none).
	link, slow int
	slowEvery  int
	// catchUp is every member's CatchUpInterval (0: the daemon's).
	catchUp time.Duration
	tune    func(*mesh.Config)
	// boot are the members each member was bootstrapped to (last start).
	boot map[*member][]*member
}

type simOptions struct {
	// minLatency..maxLatency is each pair's one-way link latency, fixed
	// per pair.
	minLatency, maxLatency time.Duration
	linkBits, slowBits     int
	slowEvery              int
	// catchUp is every member's CatchUpInterval (0: the daemon's 60 s).
	catchUp time.Duration
	tune    func(*mesh.Config)
}

// newSimGroup starts the simulated network; members are added with add.
// It must be called inside a synctest bubble.
func newSimGroup(t testing.TB, o simOptions) *simGroup {
	g := &simGroup{t: t, rng: rand.New(rand.NewPCG(1, 2)), link: o.linkBits, slow: o.slowBits, slowEvery: o.slowEvery, catchUp: o.catchUp, tune: o.tune, boot: map[*member][]*member{}}
	if g.tune == nil {
		g.tune = func(*mesh.Config) {}
	}
	span := o.maxLatency - o.minLatency
	g.net = &simnet.Simnet{
		Logger: slog.New(slog.DiscardHandler),
		LatencyFunc: func(p *simnet.Packet) time.Duration {
			return o.minLatency + pairDelay(p.From, p.To, span)
		},
	}
	g.net.Start()
	t.Cleanup(func() { g.net.Close() }) // after every member (cleanups run last-in first-out)
	return g
}

// pairDelay is a delay in [0, span) fixed for the unordered pair a, b.
func pairDelay(a, b net.Addr, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	x, y := a.String(), b.String()
	if x > y {
		x, y = y, x
	}
	h := fnv.New64a()
	h.Write([]byte(x + "|" + y))
	return time.Duration(h.Sum64() % uint64(span))
}

// simStore is a simulated member's store: badger's memtable and block
// cache at 1 MiB (the daemon's are 4 and 8 MiB). A member holds a few
// thousand small records, whose index entries fill a fraction of that;
// the daemon's memtable arena alone (1.3 × MemTableBytes, allocated at
// open) would be 5 MiB of every member's heap.
func simStore() store.Options { return store.Options{MemTableBytes: 1 << 20, BlockCacheBytes: 1 << 20} }

// transport is the mesh option putting a member on the next simulated IP.
func (g *simGroup) transport() func(*mesh.Config) {
	i := g.addrs
	g.addrs++
	bits := g.link
	if g.slowEvery > 0 && i%g.slowEvery == g.slowEvery-1 {
		bits = g.slow
	}
	link := simnet.NodeBiDiLinkSettings{Downlink: simnet.LinkSettings{BitsPerSecond: bits}, Uplink: simnet.LinkSettings{BitsPerSecond: bits}}
	addr := fmt.Sprintf("/ip4/%s/udp/8000/quic-v1", simnet.IntToPublicIPv4(i))
	return func(c *mesh.Config) {
		// A daemon's period, not the 3 s of the small-group tests: with
		// 99 peers each round is 99 reconciliations and peer-info frames.
		c.CatchUpInterval = mesh.DefaultConfig().CatchUpInterval
		if g.catchUp > 0 {
			c.CatchUpInterval = g.catchUp
		}
		// The daemon's 5 s, not the 200 ms the key-rotation tests need:
		// each reload reads the home's secrets from disk, real work that a
		// thousand members would do 5,000 times per simulated second.
		c.KeyReload = mesh.DefaultConfig().KeyReload
		// Simulated IPs are public. AutoNAT v2's dial-back host opens a
		// real UDP socket outside simnet, which stalls the bubble for good.
		c.Reachability = mesh.ReachPublic
		mesh.UseTransport(c,
			libp2p.ListenAddrStrings(addr),
			simlibp2p.QUICSimnet(g.net, link),
			// identify's address discovery stalls a synctest bubble
			// (x/simlibp2p does the same).
			libp2p.DisableIdentifyAddressDiscovery(),
		)
	}
}

// add starts a member bootstrapped to up to three random members already
// running; peer exchange (peer-info) finds it the rest.
func (g *simGroup) add(name string) *member {
	var boot []*member
	for _, i := range g.rng.Perm(len(g.ms))[:min(3, len(g.ms))] {
		if g.ms[i].m != nil {
			boot = append(boot, g.ms[i])
		}
	}
	mb := newMemberStore(g.t, "thousand", name, boot, with(g.tune, g.transport()), simStore())
	g.ms = append(g.ms, mb)
	g.boot[mb] = boot
	return mb
}

// restart brings a stopped member back on a fresh address, bootstrapped to
// up to three random running members.
func (g *simGroup) restart(mb *member) {
	var boot []*member
	for _, i := range g.rng.Perm(len(g.ms)) {
		if g.ms[i].m != nil && g.ms[i] != mb {
			boot = append(boot, g.ms[i])
			if len(boot) == 3 {
				break
			}
		}
	}
	mb.tune = with(g.tune, g.transport())
	mb.start(boot)
	g.boot[mb] = boot
}

// restartTo brings a stopped member back on a fresh address, bootstrapped
// to boot.
func (g *simGroup) restartTo(mb *member, boot []*member) {
	mb.tune = with(g.tune, g.transport())
	mb.start(boot)
	g.boot[mb] = boot
}

// running are the members whose mesh is up.
func (g *simGroup) running() []*member {
	var out []*member
	for _, mb := range g.ms {
		if mb.m != nil {
			out = append(out, mb)
		}
	}
	return out
}

// kept is how many members keep mb dialled or are kept dialled by it
// (bootstrap peers, protected from trimming at the end that dials).
func (g *simGroup) kept(mb *member) int {
	n := len(g.boot[mb])
	for other, boot := range g.boot {
		if other != mb && other.m != nil && slices.Contains(boot, mb) {
			n++
		}
	}
	return n
}
