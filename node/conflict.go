package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// ErrDisputed is wrapped (with ErrRejected) when a record's author is a
// nodeId two keys claim: the record is stored quarantined (kept, never
// surfaced or relayed) until the operator picks a key with Trust. It is a
// local verdict: the relay is not at fault.
var ErrDisputed = errors.New("author's nodeId is claimed by two keys")

// Conflict is a nodeId more than one key has proved, in a handshake, to
// claim.
type Conflict struct {
	NodeID string `json:"nodeId"`
	// Keys are the claimants' Ed25519 keys, the first pinned first.
	Keys []string `json:"keys"`
	// Names are the names each claimant gave, in the order of Keys.
	Names []string `json:"names"`
}

// Conflicts lists the nodeIds in conflict, by nodeId.
func (n *Node) Conflicts(ctx context.Context) ([]Conflict, error) {
	peers, err := n.st.Peers(ctx)
	if err != nil {
		return nil, err
	}
	out := []Conflict{}
	for _, p := range peers {
		if !p.Conflicted() {
			continue
		}
		c := Conflict{NodeID: p.NodeID, Keys: []string{cmb.EncodeKey(p.Ed25519)}, Names: []string{p.Name}}
		for _, cl := range p.Claimants {
			c.Keys = append(c.Keys, cmb.EncodeKey(cl.Ed25519))
			c.Names = append(c.Names, cl.Name)
		}
		out = append(out, c)
	}
	return out, nil
}

// TrustResult is what Trust did.
type TrustResult struct {
	NodeID string `json:"nodeId"`
	Key    string `json:"key"`
	// Resolved: the nodeId was in conflict.
	Resolved bool `json:"resolved"`
	// Unquarantined records verify with the chosen key; Quarantined ones
	// (surfaced before) do not.
	Unquarantined int `json:"unquarantined"`
	Quarantined   int `json:"quarantined"`
}

// Trust pins key for nodeID as the operator's choice (`cmbnode trust`, or
// the inviter an invite names): confirmed and trusted, so no later
// handshake can dispute it. A conflict over the nodeId ends: the records
// the chosen key signed are surfaced again, and those it did not sign stay
// (or become) quarantined.
func (n *Node) Trust(ctx context.Context, nodeID string, key ed25519.PublicKey, x []byte) (TrustResult, error) {
	nodeID = strings.ToLower(nodeID)
	if err := cmb.ValidateNodeID(nodeID); err != nil {
		return TrustResult{}, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	if strings.EqualFold(nodeID, n.id.NodeID) {
		return TrustResult{}, fmt.Errorf("%w: %s is this node's own nodeId, always pinned to its own key", ErrRejected, nodeID)
	}
	res := TrustResult{NodeID: nodeID, Key: cmb.EncodeKey(key)}
	prev, found, err := n.st.TrustPeer(ctx, store.Peer{NodeID: nodeID, Ed25519: key, X25519: x})
	if err != nil {
		return res, err
	}
	res.Resolved = prev.Conflicted()
	n.trustGen.Add(1)
	if !found {
		return res, nil
	}
	var back []string
	for _, k := range n.st.Quarantined() {
		r, err := n.st.Get(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return res, err
		}
		if !strings.EqualFold(r.CreatedBy, nodeID) {
			continue
		}
		if rec, err := cmb.Decode(r.Raw); err == nil && rec.VerifySignature(key) == nil {
			back = append(back, k)
		}
	}
	if res.Unquarantined, err = n.st.Unquarantine(ctx, back); err != nil {
		return res, err
	}
	if res.Quarantined, err = n.quarantineForged(ctx, nodeID, key); err != nil {
		return res, err
	}
	n.log.Warn("operator trusted a key for a nodeId", "nodeId", nodeID, "key", res.Key,
		"resolvedConflict", res.Resolved, "unquarantined", res.Unquarantined, "quarantined", res.Quarantined)
	return res, nil
}
