package mesh_test

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/cmbnode/cmbnode/node/mesh"
)

func ranked(t *testing.T, addrs ...string) []string {
	t.Helper()
	var in []ma.Multiaddr
	for _, s := range addrs {
		in = append(in, ma.StringCast(s))
	}
	var out []string
	for _, d := range mesh.NATDialRanker(in) {
		out = append(out, d.Addr.String())
	}
	slices.Sort(out)
	return out
}

// A peer offering a relay circuit is behind a NAT: its public TCP address
// is not dialled (the SYN would leave NAT state that breaks the hole punch
// that follows); its QUIC, private and circuit addresses are.
func TestNATDialRankerSkipsNATedTCP(t *testing.T) {
	const circuit = "/ip4/11.0.0.1/tcp/4747/p2p/12D3KooWSUGewZtNVm2m4iXofbyrryPBqoiy9A7GHji1P6Fv6hdm/p2p-circuit"
	got := ranked(t, "/ip4/11.0.0.2/tcp/4747", "/ip4/11.0.0.2/udp/4747/quic-v1", "/ip4/10.1.0.2/tcp/4747", circuit)
	want := []string{"/ip4/10.1.0.2/tcp/4747", "/ip4/11.0.0.1/tcp/4747/p2p/12D3KooWSUGewZtNVm2m4iXofbyrryPBqoiy9A7GHji1P6Fv6hdm/p2p-circuit", "/ip4/11.0.0.2/udp/4747/quic-v1"}
	if !slices.Equal(got, want) {
		t.Fatalf("ranked %v, want %v", got, want)
	}
}

// Without a circuit address every address is dialled, as libp2p's default
// ranker would.
func TestNATDialRankerKeepsDirectPeers(t *testing.T) {
	in := []ma.Multiaddr{ma.StringCast("/ip4/11.0.0.2/tcp/4747"), ma.StringCast("/ip4/11.0.0.2/udp/4747/quic-v1")}
	got, want := mesh.NATDialRanker(in), swarm.DefaultDialRanker(in)
	same := slices.EqualFunc(got, want, func(a, b network.AddrDelay) bool { return a.Addr.Equal(b.Addr) && a.Delay == b.Delay })
	if !same {
		t.Fatalf("ranked %v, want libp2p's %v", got, want)
	}
}
