package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cmbnode/cmbnode/cmb"
)

// ResolvePeer turns a recipient as a person types it into a nodeId: a
// nodeId is returned as given (lowercased); anything else is a display
// name, looked up among the peers whose handshake gave the roster a name
// and an encryption key (only those can be sent a directed record). An
// exact match wins over a match that differs only in case. A name no peer
// has wraps ErrNotFound; one several peers share wraps ErrBadRequest and
// ErrAmbiguous and lists them, so the caller picks a nodeId.
func (n *Node) ResolvePeer(ctx context.Context, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if cmb.ValidateNodeID(ref) == nil {
		return strings.ToLower(ref), nil
	}
	if ref == "" {
		return "", fmt.Errorf("%w: empty recipient", ErrBadRequest)
	}
	peers, err := n.st.Peers(ctx)
	if err != nil {
		return "", fmt.Errorf("resolve peer name %q: %w", ref, err)
	}
	var exact, folded []string
	for _, p := range peers {
		if p.Name == "" || len(p.X25519) == 0 || strings.EqualFold(p.NodeID, n.id.NodeID) {
			continue
		}
		switch {
		case p.Name == ref:
			exact = append(exact, p.Name+" ("+p.NodeID+")")
		case strings.EqualFold(p.Name, ref):
			folded = append(folded, p.Name+" ("+p.NodeID+")")
		}
	}
	matches := exact
	if len(matches) == 0 {
		matches = folded
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("%w: no peer named %q has connected to this node (give its nodeId, or see `cmbnode peers`)", ErrNotFound, cmb.Truncate(ref, 80))
	case 1:
		m := matches[0]
		return m[strings.LastIndexByte(m, '(')+1 : len(m)-1], nil
	}
	slices.Sort(matches)
	return "", fmt.Errorf("%w: %w: %d peers are named %q: %s; give the nodeId", ErrBadRequest, ErrAmbiguous, len(matches), ref, strings.Join(matches, ", "))
}

// resolveAuthor turns an author as a person types it into what records
// carry in createdBy: a nodeId as given (lowercased); else the name this
// node or a peer in its roster goes by, when exactly one has it (case
// ignored), as that one's nodeId; else ref itself (an agent-name author,
// which records carry verbatim). Several nodes with the name wrap
// ErrBadRequest and ErrAmbiguous.
func (n *Node) resolveAuthor(ctx context.Context, ref string) (string, error) {
	if cmb.ValidateNodeID(ref) == nil {
		return strings.ToLower(ref), nil
	}
	var ids []string
	if strings.EqualFold(n.id.Name, ref) {
		ids = append(ids, strings.ToLower(n.id.NodeID))
	}
	peers, err := n.st.Peers(ctx)
	if err != nil {
		return "", fmt.Errorf("resolve author %q: %w", ref, err)
	}
	for _, p := range peers {
		if p.Name != "" && strings.EqualFold(p.Name, ref) && !slices.Contains(ids, p.NodeID) {
			ids = append(ids, p.NodeID)
		}
	}
	switch len(ids) {
	case 0:
		return ref, nil
	case 1:
		return ids[0], nil
	}
	slices.Sort(ids)
	return "", fmt.Errorf("%w: %w: %d nodes are named %q (%s); give the nodeId", ErrBadRequest, ErrAmbiguous, len(ids), ref, strings.Join(ids, ", "))
}
