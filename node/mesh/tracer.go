package mesh

import (
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// dropTracer counts what GossipSub discards under load — queues full,
// validation throttled, a subscriber too slow — so no drop is silent:
// each shows in the metrics and a rising count is logged. Catch-up
// recovers the records themselves. It also follows which peers are in our
// GossipSub mesh for the group topic (the only topic this router joins).
type dropTracer struct {
	m      *Mesh
	mu     sync.Mutex
	drops  map[string]int64
	logged time.Time
	mesh   map[peer.ID]struct{}
}

func (d *dropTracer) drop(reason string) {
	d.mu.Lock()
	d.drops[reason]++
	n := d.drops[reason]
	logNow := time.Since(d.logged) > 10*time.Second
	if logNow {
		d.logged = time.Now()
	}
	d.mu.Unlock()
	if logNow {
		d.m.log.Warn("gossip dropped messages under load; catch-up will recover them", "reason", reason, "total", n)
	}
}

func (d *dropTracer) snapshot() map[string]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int64, len(d.drops))
	for k, v := range d.drops {
		out[k] = v
	}
	return out
}

// meshPeers is the number of peers currently grafted into our mesh.
func (d *dropTracer) meshPeers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mesh)
}

// Graft, Prune, Leave and OnClosedOutboundStream are every way GossipSub
// adds a peer to or removes it from the mesh.
func (d *dropTracer) Graft(p peer.ID, _ string) {
	d.mu.Lock()
	d.mesh[p] = struct{}{}
	d.mu.Unlock()
}

func (d *dropTracer) Prune(p peer.ID, _ string) {
	d.mu.Lock()
	delete(d.mesh, p)
	d.mu.Unlock()
}

func (d *dropTracer) Leave(string) {
	d.mu.Lock()
	clear(d.mesh)
	d.mu.Unlock()
}

func (d *dropTracer) OnClosedOutboundStream(p peer.ID) { d.Prune(p, "") }

func (d *dropTracer) RejectMessage(_ *pubsub.Message, reason string) {
	switch reason {
	case pubsub.RejectValidationQueueFull, pubsub.RejectValidationThrottled:
		d.drop(reason)
	}
}
func (d *dropTracer) DropRPC(*pubsub.RPC, peer.ID)             { d.drop("outbound queue full") }
func (d *dropTracer) UndeliverableMessage(*pubsub.Message)     { d.drop("subscriber too slow") }
func (d *dropTracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (d *dropTracer) Join(string)                              {}
func (d *dropTracer) ValidateMessage(*pubsub.Message)          {}
func (d *dropTracer) DeliverMessage(*pubsub.Message)           {}
func (d *dropTracer) ThrottlePeer(peer.ID)                     {}
func (d *dropTracer) RecvRPC(*pubsub.RPC)                      {}
func (d *dropTracer) SendRPC(*pubsub.RPC, peer.ID)             {}
func (d *dropTracer) DuplicateMessage(*pubsub.Message)         { d.m.stats.gossipDuplicates.Add(1) }
func (d *dropTracer) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {
}
