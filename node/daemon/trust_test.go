package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
)

// TrustOffline pins an inviter's key, confirmed and trusted, in a home no
// daemon serves (creating its store), so the node that then starts holds
// the pin before its first connection.
func TestTrustOfflinePinsBeforeTheFirstStart(t *testing.T) {
	home := t.TempDir()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	inviter := "0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f"
	if err := TrustOffline(context.Background(), home, inviter, pub); err != nil {
		t.Fatal(err)
	}
	id, err := identity.Create(home, "joiner", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "default", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p, err := n.Store().GetPeer(context.Background(), inviter)
	if err != nil || !p.Trusted || !p.Confirmed || !ed25519.PublicKey(p.Ed25519).Equal(pub) {
		t.Fatalf("the inviter's pin: %+v %v", p, err)
	}
	// A handshake with another key for the inviter's nodeId is refused.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := n.PinPeer(context.Background(), inviter, other, nil, "squatter"); err == nil {
		t.Fatal("a squatter's key was accepted for the trusted inviter")
	}
}
