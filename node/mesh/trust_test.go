package mesh_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/identity"
)

// rogueMember is a rogue host handshaken into grp on victim and joined to
// the group topic, ready to publish.
func rogueMember(t *testing.T, victim *member, grp string, wantPeers int) *rogue {
	t.Helper()
	r := newRogue(t)
	r.dial(victim)
	r.join(grp)
	r.serve()
	r.joinTopic(grp)
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == wantPeers })
	eventually(t, 10*time.Second, "the rogue sees the victim on the topic", func() bool {
		return len(r.ps.ListPeers(r.topic.String())) > 0
	})
	return r
}

// recallKeys returns the keys recall finds for query on mb.
func recallKeys(t *testing.T, mb *member, query string) []string {
	t.Helper()
	hits, err := mb.n.Recall(context.Background(), query, 50)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, h := range hits {
		keys = append(keys, h.Key)
	}
	return keys
}

// A member cannot publish records "authored by" the receiving node: a
// record claiming the receiver's nodeId is checked against the receiver's
// own key, never the frame's, so it is neither stored nor served; honest
// traffic keeps flowing during the attack.
func TestForgedSelfAuthoredRecordRefused(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := rogueMember(t, victim, "alpha", 2)
	halt := honestTraffic(t, honest)

	forged := r.build("the victim said this, honestly", "alpha", victim.nodeID())
	r.publish(frameOf(t, forged, r.id.PublicKeyB64()))
	// The same forgery without a frame key, so only the victim's own pin can judge it.
	bare := r.build("the victim said this too", "alpha", victim.nodeID())
	r.publish(frameOf(t, bare, ""))

	eventually(t, 10*time.Second, "both forgeries rejected", func() bool {
		rej := victim.n.Counters.Rejected()
		return rej["key-conflict"] >= 1 && rej["bad-signature"] >= 1
	})
	if victim.has(forged.Key) || victim.has(bare.Key) {
		t.Fatal("the victim stored a record forged in its own name")
	}
	// Honest traffic flows both ways, and the victim's genuine records keep
	// verifying everywhere.
	k := victim.remember("genuinely mine", nil, "")
	eventually(t, 10*time.Second, "honest node stores the victim's genuine record", func() bool { return honest.has(k) })
	k2 := honest.remember("still flowing", nil, "")
	eventually(t, 10*time.Second, "victim stores honest traffic", func() bool { return victim.has(k2) })
	if honest.has(forged.Key) || honest.has(bare.Key) {
		t.Fatal("a forgery was relayed to the honest node")
	}
	victim.storesAll(t, halt())
}

// A key that came only with a gossiped frame
// is marked unconfirmed, and a later handshake presenting another key for
// the nodeId wins: the records the frame key signed are quarantined (kept,
// not surfaced, listed by status), counted and logged, while an honest
// member's records keep arriving.
func TestHandshakeKeyWinsOverFrameKey(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := rogueMember(t, victim, "alpha", 2)
	halt := honestTraffic(t, honest)

	// The real owner of this nodeId exists but has not met the victim yet.
	realHome := t.TempDir()
	realID, err := identity.Create(realHome, "real", nil)
	if err != nil {
		t.Fatal(err)
	}
	var forged []string
	for _, focus := range []string{"launch codes are public", "the launch moved to monday"} {
		rec := r.build(focus, "alpha", realID.NodeID)
		r.publish(frameOf(t, rec, r.id.PublicKeyB64()))
		forged = append(forged, rec.Key)
	}
	eventually(t, 10*time.Second, "the frame-keyed records are kept", func() bool {
		return victim.has(forged[0]) && victim.has(forged[1])
	})
	ctx := context.Background()
	got, err := victim.n.Get(ctx, forged[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyConfirmed {
		t.Fatal("a record whose author key came only with its frame is shown as confirmed")
	}
	if keys := recallKeys(t, victim, "launch"); len(keys) != 2 {
		t.Fatalf("before the handshake recall found %v, want both records", keys)
	}

	// The real node connects: its handshake proves its key.
	realNode := &member{t: t, home: realHome, grp: "alpha"}
	realNode.start([]*member{victim})
	t.Cleanup(realNode.stop)
	eventually(t, 20*time.Second, "the forged records are quarantined", func() bool {
		return len(victim.n.Status().Quarantined) == 2
	})
	st := victim.n.Status()
	for _, k := range forged {
		if !slices.Contains(st.Quarantined, k) {
			t.Errorf("status does not list quarantined record %s", k)
		}
		if !victim.has(k) {
			t.Errorf("quarantined record %s was not kept", k)
		}
		if _, err := victim.n.Get(ctx, k); err == nil {
			t.Errorf("quarantined record %s is still surfaced by get", k)
		}
	}
	if st.Counters.KeysReplaced != 1 || st.Counters.Quarantined != 2 {
		t.Errorf("counters: keysReplaced %d quarantined %d, want 1 and 2", st.Counters.KeysReplaced, st.Counters.Quarantined)
	}
	if keys := recallKeys(t, victim, "launch"); len(keys) != 0 {
		t.Fatalf("recall still surfaces quarantined records: %v", keys)
	}
	// The real author's records now verify against its handshake key, and
	// the rogue's further claims are refused.
	k := realNode.remember("the launch is on friday", nil, "")
	eventually(t, 10*time.Second, "victim stores the real author's record", func() bool { return victim.has(k) })
	got, err = victim.n.Get(ctx, k)
	if err != nil || !got.KeyConfirmed {
		t.Fatalf("real author's record: %+v %v, want a confirmed key", got, err)
	}
	late := r.build("one more claim", "alpha", realID.NodeID)
	r.publish(frameOf(t, late, r.id.PublicKeyB64()))
	eventually(t, 10*time.Second, "the late claim is refused as a key conflict", func() bool {
		return victim.n.Counters.Rejected()["key-conflict"] >= 1
	})
	if victim.has(late.Key) {
		t.Fatal("the rogue's claim was stored after the handshake")
	}
	victim.storesAll(t, halt())
	// A member joining later catches up from the victim without the
	// quarantined records: they are not served either. The honest member
	// leaves first: it kept the forgeries under the frame key, as the
	// victim did before the handshake, and would serve them.
	honest.stop()
	newcomer := newMember(t, "alpha", "newcomer", []*member{victim}, nil)
	eventually(t, 20*time.Second, "the newcomer catches up", func() bool { return newcomer.has(k) })
	for _, f := range forged {
		if newcomer.has(f) {
			t.Errorf("quarantined record %s was served to a newcomer", f)
		}
	}
}

// An unsigned legacy record claiming an author
// whose key the victim holds is refused with a named reason, whatever the
// frame says, and honest traffic keeps flowing.
func TestUnsignedLegacyRecordRefused(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := rogueMember(t, victim, "alpha", 2)
	halt := honestTraffic(t, honest)

	legacy := unsignedLegacy(t, honest.nodeID(), "an unsigned legacy record")
	r.publish(frameOf(t, legacy, ""))
	eventually(t, 10*time.Second, "the unsigned record is refused as unsigned", func() bool {
		return victim.n.Counters.Rejected()["unsigned"] >= 1
	})
	if victim.has(legacy.Key) {
		t.Fatal("victim stored an unsigned record from an author whose key it holds")
	}
	k := honest.remember("signed and flowing", nil, "")
	eventually(t, 10*time.Second, "victim stores honest traffic", func() bool { return victim.has(k) })
	victim.storesAll(t, halt())
}

// unsignedLegacy is a valid unsigned legacy (cmb-) record of group alpha
// claiming createdBy.
func unsignedLegacy(t *testing.T, createdBy, focus string) *cmb.Record {
	t.Helper()
	texts := [cmb.NumFields]string{focus, "neutral", "neutral", "neutral", "neutral", "neutral", "neutral"}
	legacy := &cmb.Record{Key: cmb.AddressLegacy(&texts), CreatedBy: createdBy, CreatedAt: time.Now().UnixMilli()}
	for i := range texts {
		legacy.Fields[i].Text = texts[i]
	}
	legacy.SetGroup("alpha")
	if err := legacy.Verify(cmb.Policy{Audience: cmb.Audience{Group: "alpha"}, AllowUnsigned: true}); err != nil {
		t.Fatalf("the test record is not a valid unsigned legacy record: %v", err)
	}
	return legacy
}

// With strict_signatures off, MMP §18.3.1's rules still hold against a
// rogue member: an unsigned record is admitted from an author never seen
// signing whose key the victim does not hold, but refused (unsigned) for an
// author whose key it holds and for one that has had a signed record
// admitted (the downgrade), while honest traffic keeps flowing.
func TestUnsignedRefusedWithoutStrictSignatures(t *testing.T) {
	home := t.TempDir()
	if _, err := identity.Create(home, "victim", nil); err != nil {
		t.Fatal(err)
	}
	victim := &member{t: t, home: home, grp: "alpha", allowUnsigned: true}
	victim.start(nil)
	t.Cleanup(victim.stop)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := rogueMember(t, victim, "alpha", 2)
	halt := honestTraffic(t, honest)

	// The victim is lenient: an author it knows nothing of may be unsigned.
	fresh := unsignedLegacy(t, "agent-never-signed", "unsigned from a stranger")
	r.publish(frameOf(t, fresh, ""))
	eventually(t, 10*time.Second, "the lenient victim admits an unknown author's unsigned record", func() bool { return victim.has(fresh.Key) })

	// An author whose key the victim holds (a handshake pinned it).
	known := unsignedLegacy(t, honest.nodeID(), "unsigned in the honest member's name")
	r.publish(frameOf(t, known, ""))
	eventually(t, 10*time.Second, "the unsigned record of a known key is refused as unsigned", func() bool {
		return victim.n.Counters.Rejected()["unsigned"] >= 1
	})

	// An author that has signed: its key came only with frames, and the
	// later unsigned record carries none, so only the durable "has signed"
	// state can refuse it.
	signed := unsignedLegacy(t, "agent-signer", "signed by an agent")
	texts := signed.Fields.Texts()
	signed.Key = cmb.AddressV1(&texts, nil, signed.CreatedBy)
	if err := signed.Sign(r.id.Ed25519); err != nil {
		t.Fatal(err)
	}
	r.publish(frameOf(t, signed, r.id.PublicKeyB64()))
	eventually(t, 10*time.Second, "the agent's signed record is admitted", func() bool { return victim.has(signed.Key) })
	downgrade := unsignedLegacy(t, "agent-signer", "unsigned from an author that signs")
	r.publish(frameOf(t, downgrade, ""))
	eventually(t, 10*time.Second, "the downgrade is refused as unsigned", func() bool {
		return victim.n.Counters.Rejected()["unsigned"] >= 2
	})
	for _, k := range []string{known.Key, downgrade.Key} {
		if victim.has(k) {
			t.Errorf("the lenient victim stored unsigned record %s", k)
		}
	}
	victim.storesAll(t, halt())
}
