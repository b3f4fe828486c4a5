package mesh

import (
	"slices"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// natDialRanker is libp2p's default dial ranker, except that a dial to a
// peer offering a relay circuit skips the peer's public TCP addresses.
//
// Why: a peer with a circuit address holds a relay reservation because it
// is not reachable from outside; its public TCP address is its NAT's
// mapping, which drops an unsolicited SYN. Such a dial cannot connect, and
// it is not harmless: libp2p dials TCP from our listen port (reuseport),
// so the SYN leaves an entry in our own NAT's connection tracking for
// exactly the address pair a hole punch uses next, with that SYN's
// sequence number. The circuit wins, the swarm cancels the TCP dial (a
// socket in SYN-SENT closes without a packet) and the entry stays
// (Linux: 120 s). When the peer's punching SYN then reaches our NAT before
// ours leaves, the entry lets it through to our listener, whose SYN-ACK
// carries a new sequence number; the NAT's TCP tracking finds it outside
// the window it recorded, marks it invalid and does not translate it, so
// the punch is lost, and our own punching dial finds the address pair
// taken and falls back to a random port the peer's NAT drops. Every retry
// meets the same entry. QUIC is unaffected: UDP tracking has no sequence
// numbers, so its public addresses are still dialled.
//
// Hole-punch dials do not come through here: libp2p ranks simultaneous
// connects with swarm.NoDelayDialRanker.
func natDialRanker(addrs []ma.Multiaddr) []network.AddrDelay {
	if slices.ContainsFunc(addrs, isCircuit) {
		addrs = slices.DeleteFunc(slices.Clone(addrs), natedTCP)
	}
	return swarm.DefaultDialRanker(addrs)
}

// natedTCP reports whether a is a direct public TCP address.
func natedTCP(a ma.Multiaddr) bool {
	if isCircuit(a) || !manet.IsPublicAddr(a) {
		return false
	}
	_, err := a.ValueForProtocol(ma.P_TCP)
	return err == nil
}
