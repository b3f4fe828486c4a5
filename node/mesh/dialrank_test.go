package mesh_test

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/cmbnode/cmbnode/node/mesh"
)

const relayCircuit = "/ip4/11.0.0.1/tcp/4747/p2p/12D3KooWSUGewZtNVm2m4iXofbyrryPBqoiy9A7GHji1P6Fv6hdm/p2p-circuit"

var bothListen = []string{"/ip4/0.0.0.0/tcp/4747", "/ip4/0.0.0.0/udp/4747/quic-v1"}

func addrs(ss ...string) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, s := range ss {
		out = append(out, ma.StringCast(s))
	}
	return out
}

// ranked are the addresses a host listening on listen dials, sorted.
func ranked(listen []string, dial ...string) []string {
	var out []string
	for _, d := range mesh.NATDialRanker(addrs(listen...))(addrs(dial...)) {
		out = append(out, d.Addr.String())
	}
	slices.Sort(out)
	return out
}

// A peer offering a relay circuit is behind a NAT: its public TCP address
// is not dialled (the SYN would leave NAT state that breaks the hole punch
// that follows); its QUIC, private and circuit addresses are.
func TestNATDialRankerSkipsNATedTCP(t *testing.T) {
	got := ranked(bothListen, "/ip4/11.0.0.2/tcp/4747", "/ip4/11.0.0.2/udp/4747/quic-v1", "/ip4/10.1.0.2/tcp/4747", relayCircuit)
	want := []string{"/ip4/10.1.0.2/tcp/4747", relayCircuit, "/ip4/11.0.0.2/udp/4747/quic-v1"}
	if !slices.Equal(got, want) {
		t.Fatalf("ranked %v, want %v", got, want)
	}
}

// Listening on TCP only, a peer offering TCP is dialled over TCP only (a
// QUIC dial would leave from a random port, and the address the peer
// observes would be no use to a hole punch); a peer offering only QUIC is
// still dialled over QUIC. The same the other way round.
func TestNATDialRankerPrefersListenedTransport(t *testing.T) {
	tcpOnly, quicOnly := []string{"/ip4/0.0.0.0/tcp/5000"}, []string{"/ip4/0.0.0.0/udp/5000/quic-v1"}
	both := []string{"/ip4/11.0.0.1/tcp/4747", "/ip4/11.0.0.1/udp/4747/quic-v1"}
	if got := ranked(tcpOnly, both...); !slices.Equal(got, both[:1]) {
		t.Fatalf("TCP listener dials %v, want %v", got, both[:1])
	}
	if got := ranked(quicOnly, both...); !slices.Equal(got, both[1:]) {
		t.Fatalf("QUIC listener dials %v, want %v", got, both[1:])
	}
	if got := ranked(tcpOnly, both[1]); !slices.Equal(got, both[1:]) {
		t.Fatalf("TCP listener dials %v to a QUIC-only peer, want %v", got, both[1:])
	}
}

// Listening on both, to a peer with no circuit, every address is dialled
// as libp2p's default ranker would.
func TestNATDialRankerKeepsDirectPeers(t *testing.T) {
	in := addrs("/ip4/11.0.0.2/tcp/4747", "/ip4/11.0.0.2/udp/4747/quic-v1")
	got, want := mesh.NATDialRanker(addrs(bothListen...))(in), swarm.DefaultDialRanker(in)
	same := slices.EqualFunc(got, want, func(a, b network.AddrDelay) bool { return a.Addr.Equal(b.Addr) && a.Delay == b.Delay })
	if !same {
		t.Fatalf("ranked %v, want libp2p's %v", got, want)
	}
}
