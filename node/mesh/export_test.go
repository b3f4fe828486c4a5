package mesh

import (
	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SetPeerInfoDialHook makes the mesh started from c call hook as each
// peer-info dial starts, and the function hook returns when it ends.
func SetPeerInfoDialHook(c *Config, hook func(peer.AddrInfo) (done func())) {
	c.peerInfoDialHook = hook
}

// DisableCatchUp makes the mesh started from c never reconcile with a peer.
func DisableCatchUp(c *Config) { c.noCatchUp = true }

// UseTransport makes the mesh started from c listen and dial only through
// opts (a simulated network) instead of its TCP and QUIC listeners.
func UseTransport(c *Config, opts ...libp2p.Option) { c.transport = opts }

// DisableFloodPublish makes the mesh started from c publish its records to
// its GossipSub mesh peers only.
func DisableFloodPublish(c *Config) { c.noFloodPublish = true }

// TuneGossipSub makes the mesh started from c run GossipSub with the
// router parameters f makes of go-libp2p-pubsub's defaults.
func TuneGossipSub(c *Config, f func(*pubsub.GossipSubParams)) { c.gossipParams = f }

// MDNSFound hands m an mDNS answer, as the LAN discovery service does.
func MDNSFound(m *Mesh, ai peer.AddrInfo) { mdnsNotifee{m}.HandlePeerFound(ai) }

// NATDialRanker is the dial ranker of a host listening on listen.
var NATDialRanker = natDialRanker

// TopicPeers are the peers GossipSub counts as subscribed to the group topic.
func TopicPeers(m *Mesh) []peer.ID {
	if g := m.gossip.Load(); g != nil {
		return g.topic.ListPeers()
	}
	return nil
}

// ResetGossipStreams resets m's GossipSub streams with pid in direction dir.
func ResetGossipStreams(m *Mesh, pid peer.ID, dir network.Direction) int {
	return m.resetGossipStreams(pid, dir)
}
