package mesh

import (
	"context"
	"slices"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// GossipSub forgets a peer's subscriptions whenever its own outbound
// stream to that peer dies, and learns them again only from the hello on
// the peer's next outbound stream. When one connection to a peer closes
// and another stays (a relayed connection closed after a hole punch, the
// relay going down, one of two simultaneous dials), both sides' streams
// die and both send a new hello over the connection that is left — and a
// hello that arrives before its receiver has handled its own dead stream
// is wiped by it. The peer then looks unsubscribed: nothing is published
// or forwarded to it, while its own stream to us lives on, so no new hello
// comes.
//
// watchSubscriptions repairs that. When an admitted, still connected
// member leaves the topic and has not come back within resubscribeGrace,
// every GossipSub stream with it is reset, in both directions and at once:
// both sides' outbound streams die on the one connection left and both
// send their hellos behind the resets, so each side handles its dead
// stream before the other's hello. Each side repairs only what it misses;
// the larger PeerID waits a grace longer, so when both miss the other one
// repair (the smaller side's) mends both. A repair that did not take is
// retried resubscribeTries times in all; GossipSub's own respawn backoff
// bounds how fast streams can be reopened.
const (
	resubscribeGrace = time.Second
	resubscribeTries = 3
)

// watchSubscriptions follows the topic's peer events until ctx ends; the
// caller cancels h after.
func (m *Mesh) watchSubscriptions(ctx context.Context, g *gossipSub, h *pubsub.TopicEventHandler) {
	for {
		ev, err := h.NextPeerEvent(ctx)
		if err != nil {
			return // ctx ended
		}
		if ev.Type != pubsub.PeerLeave {
			continue
		}
		pid := ev.Peer
		if _, busy := g.resubscribing.LoadOrStore(pid, struct{}{}); busy {
			continue
		}
		if !m.goRun(func(ctx context.Context) {
			defer g.resubscribing.Delete(pid)
			m.resubscribe(ctx, g, pid)
		}) {
			return // closing
		}
	}
}

// resubscribe waits for pid's subscription to come back and, if it does
// not while pid is an admitted member connected to us, resets the GossipSub
// streams with it (see watchSubscriptions).
func (m *Mesh) resubscribe(ctx context.Context, g *gossipSub, pid peer.ID) {
	wait := resubscribeGrace
	if m.h.ID() > pid {
		wait += resubscribeGrace
	}
	for try := 0; try < resubscribeTries; try++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !m.admitted(pid) || m.h.Network().Connectedness(pid) != network.Connected ||
			slices.Contains(g.topic.ListPeers(), pid) {
			return
		}
		if n := m.resetGossipStreams(pid, network.DirUnknown); n > 0 {
			m.stats.gossipResubscribes.Add(1)
			m.log.Info("member missing from the gossip topic; reopening its gossip streams", "peer", pid, "streams", n, "try", try+1)
		}
		wait = resubscribeGrace
	}
	if !slices.Contains(g.topic.ListPeers(), pid) && m.admitted(pid) {
		m.log.Warn("member still missing from the gossip topic; its records come by catch-up only", "peer", pid)
	}
}

// resetGossipStreams resets the GossipSub streams with pid in direction
// dir (network.DirUnknown: both) and says how many it reset.
func (m *Mesh) resetGossipStreams(pid peer.ID, dir network.Direction) int {
	n := 0
	for _, c := range m.h.Network().ConnsToPeer(pid) {
		for _, s := range c.GetStreams() {
			if !slices.Contains(pubsub.GossipSubDefaultProtocols, s.Protocol()) {
				continue
			}
			if dir != network.DirUnknown && s.Stat().Direction != dir {
				continue
			}
			_ = s.Reset()
			n++
		}
	}
	return n
}
