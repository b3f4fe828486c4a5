package mesh_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
)

// A rogue member handshakes first while claiming the nodeId of a member
// the victim has not met, and publishes records in its name. When the real
// member then handshakes with its own key, neither key wins: the real
// member still connects, the nodeId's records (the squatter's and the real
// member's) are kept but quarantined and not relayed, the conflict is
// listed, and once the operator trusts the real key its records surface
// while the squatter's stay quarantined. Honest traffic flows throughout.
// Before the fix the first key stayed pinned for good: the forged record
// stayed surfaced and the real member was refused ("nodeId is pinned to
// another key").
func TestSquattedNodeIDIsAConflict(t *testing.T) {
	ctx := context.Background()
	victim := newMember(t, "alpha", "victim", nil, nil)
	bystander := newMember(t, "alpha", "bystander", []*member{victim}, nil)
	waitPeers(t, 1, victim, bystander)
	halt := honestTraffic(t, bystander)

	realHome := t.TempDir()
	realID, err := identity.Create(realHome, "real", nil)
	if err != nil {
		t.Fatal(err)
	}
	real := newMemberIn(t, realHome, "alpha", "real", nil, nil)

	r := newRogue(t)
	r.id.NodeID = realID.NodeID // the squat: the rogue's own key, the real member's nodeId
	r.dial(victim)
	r.join("alpha")
	r.serve()
	r.joinTopic("alpha")
	eventually(t, 10*time.Second, "victim admits the squatter", func() bool { return victim.m.PeerCount() == 2 })
	rogueKey := r.id.PublicKeyB64()
	eventually(t, 10*time.Second, "the rogue sees the victim on the topic", func() bool {
		return len(r.ps.ListPeers(topicOf(t, "alpha"))) > 0
	})
	forged := r.build("forged in the real member's name", "alpha", realID.NodeID)
	r.publish(frameOf(t, forged, rogueKey))
	eventually(t, 10*time.Second, "victim stores the squatter's record", func() bool { return victim.has(forged.Key) })

	// The real member arrives with its own key.
	real.start([]*member{victim})
	eventually(t, 20*time.Second, "the real member is connected despite the squat", func() bool { return real.m.PeerCount() >= 1 })
	var conflicts []node.Conflict
	eventually(t, 10*time.Second, "the conflict is listed", func() bool {
		conflicts, err = victim.n.Conflicts(ctx)
		return err == nil && len(conflicts) == 1
	})
	realKey := realID.PublicKeyB64()
	if c := conflicts[0]; c.NodeID != realID.NodeID || len(c.Keys) != 2 || !slices.Contains(c.Keys, realKey) || !slices.Contains(c.Keys, rogueKey) {
		t.Fatalf("conflict %+v, want %s claimed by %s and %s", c, realID.NodeID, rogueKey, realKey)
	}
	if _, err := victim.n.Get(ctx, forged.Key); !errors.Is(err, node.ErrQuarantined) {
		t.Fatalf("the squatter's record is still surfaced during the conflict: %v", err)
	}

	// While disputed, both claimants' records are kept, quarantined, not relayed.
	forged2 := r.build("forged during the conflict", "alpha", realID.NodeID)
	r.publish(frameOf(t, forged2, rogueKey))
	realRec := real.remember("the real member speaks", nil, "")
	for _, k := range []string{forged2.Key, realRec} {
		eventually(t, 10*time.Second, "victim keeps "+k, func() bool { return victim.has(k) })
		if !victim.n.Store().IsQuarantined(k) {
			t.Errorf("%s is surfaced while its author is disputed", k)
		}
	}

	res, err := victim.n.Trust(ctx, realID.NodeID, realID.Ed25519.Public().(ed25519.PublicKey), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resolved || res.Unquarantined < 1 {
		t.Fatalf("trust: %+v, want the conflict resolved and the real record surfaced", res)
	}
	if _, err := victim.n.Get(ctx, realRec); err != nil {
		t.Fatalf("the real member's record after trust: %v", err)
	}
	for _, k := range []string{forged.Key, forged2.Key} {
		if !victim.n.Store().IsQuarantined(k) {
			t.Errorf("squatter's record %s surfaced after the operator trusted the real key", k)
		}
	}
	if c, _ := victim.n.Conflicts(ctx); len(c) != 0 {
		t.Fatalf("conflicts after trust: %+v", c)
	}
	if bystander.has(forged2.Key) {
		t.Error("the victim relayed a disputed record to an honest member")
	}
	victim.storesAll(t, halt())
}
