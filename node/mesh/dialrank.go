package mesh

import (
	"slices"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// natDialRanker is libp2p's default dial ranker with two changes, both so
// that hole punching finds the NAT state it needs; listen are our listen
// addresses.
//
// A dial to a peer offering a relay circuit skips the peer's public TCP
// addresses. A peer with a circuit address holds a relay reservation
// because it is not reachable from outside; its public TCP address is its
// NAT's mapping, which drops an unsolicited SYN. Such a dial cannot
// connect, and it is not harmless: libp2p dials TCP from our listen port
// (reuseport), so the SYN leaves an entry in our own NAT's connection
// tracking for exactly the address pair a hole punch uses next, with that
// SYN's sequence number. The circuit wins, the swarm cancels the TCP dial
// (a socket in SYN-SENT closes without a packet) and the entry stays
// (Linux: 120 s). When the peer's punching SYN then reaches our NAT before
// ours leaves, the entry lets it through to our listener, whose SYN-ACK
// carries a new sequence number; the NAT's TCP tracking finds it outside
// the window it recorded, marks it invalid and does not translate it, so
// the punch is lost, and our own punching dial finds the address pair
// taken and falls back to a random port the peer's NAT drops. Every retry
// meets the same entry. QUIC is unaffected: UDP tracking has no sequence
// numbers, so its public addresses are still dialled.
//
// A dial skips the addresses of a transport (TCP or QUIC) we do not listen
// on while the peer offers one we do. Only a connection from a listen
// port tells us, through the address the peer observes, where our NAT
// maps that port, which is the address a hole punch offers
// (watchObserved); a QUIC dial with no QUIC listener leaves from a random
// port. A peer reachable only over the other transport is still dialled.
//
// Hole-punch dials do not come through here: libp2p ranks simultaneous
// connects with swarm.NoDelayDialRanker.
func natDialRanker(listen []ma.Multiaddr) network.DialRanker {
	listensTCP, listensQUIC := slices.ContainsFunc(listen, isTCP), slices.ContainsFunc(listen, isQUIC)
	return func(addrs []ma.Multiaddr) []network.AddrDelay {
		addrs = slices.Clone(addrs)
		if slices.ContainsFunc(addrs, isCircuit) {
			addrs = slices.DeleteFunc(addrs, natedTCP)
		}
		if listensTCP && !listensQUIC && slices.ContainsFunc(addrs, directTCP) {
			addrs = slices.DeleteFunc(addrs, directQUIC)
		}
		if listensQUIC && !listensTCP && slices.ContainsFunc(addrs, directQUIC) {
			addrs = slices.DeleteFunc(addrs, directTCP)
		}
		return swarm.DefaultDialRanker(addrs)
	}
}

func isTCP(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_TCP)
	return err == nil
}

func isQUIC(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_QUIC_V1)
	return err == nil
}

func directTCP(a ma.Multiaddr) bool  { return !isCircuit(a) && isTCP(a) }
func directQUIC(a ma.Multiaddr) bool { return !isCircuit(a) && isQUIC(a) }

// natedTCP reports whether a is a direct public TCP address.
func natedTCP(a ma.Multiaddr) bool { return directTCP(a) && manet.IsPublicAddr(a) }
