package mesh

import (
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// gossipHost is the host GossipSub is given: GossipSub reads a peer's
// inbound streams only once the peer is admitted (awaitAdmitted), so a
// peer that never proves membership is never heard — in particular its
// subscription never enters GossipSub's topic table.
//
// The peer filter and the unadmitted score are not enough on their own:
// the filter does not cover subscriptions, and GossipSub's scorer rates a
// peer it has no statistics for yet (its outbound stream still opening) as
// 0, above the publish threshold, so flood publish would send to a
// subscribed stranger in that window.
type gossipHost struct {
	host.Host
	m *Mesh
}

func (h gossipHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, h.admittedOnly(handler))
}

func (h gossipHost) SetStreamHandlerMatch(pid protocol.ID, match func(protocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, match, h.admittedOnly(handler))
}

// admittedOnly runs handler once the stream's peer is admitted, and resets
// the stream if it is not within the handshake's time (a member's pubsub
// then reopens its stream, and is heard, once admitted).
func (h gossipHost) admittedOnly(handler network.StreamHandler) network.StreamHandler {
	return func(s network.Stream) {
		if !h.m.awaitAdmitted(s.Conn().RemotePeer()) {
			s.Reset()
			return
		}
		handler(s)
	}
}
