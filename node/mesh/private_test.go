package mesh_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// rotatedKeys is the test's group alpha at epoch 2, rotated rotatedAgo
// ago, with grace: members built from it share both epochs.
func rotatedKeys(t *testing.T, rotatedAgo, grace time.Duration) *groupkey.Keyring {
	t.Helper()
	g := testGroup(t, "alpha")
	g.Epochs = append(g.Epochs, groupkey.Epoch{N: 2, Secret: sha256.Sum256([]byte("epoch 2 of " + t.Name())), Created: time.Now().Add(-rotatedAgo).Truncate(time.Millisecond)})
	k, err := groupkey.New(g, groupkey.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func useKeys(k func() *groupkey.Keyring) func(*mesh.Config) {
	return func(c *mesh.Config) { c.Keys = k() }
}

// drain reads every frame the victim sends until it closes the stream.
func (r *rogue) drain() [][]byte {
	_ = r.s.SetReadDeadline(time.Now().Add(15 * time.Second))
	var out [][]byte
	for {
		p, err := cmb.ReadFrame(r.s, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "closed") {
				r.t.Logf("reading from victim: %v", err)
			}
			return out
		}
		out = append(out, p)
	}
}

// refusal drains the victim's frames and returns the error codes among
// them; anything but its handshake, nonce and error frames, or any of
// leaks, fails the test: a refused peer gets nothing of the group.
func (r *rogue) refusal(leaks ...string) []int {
	t := r.t
	t.Helper()
	var codes []int
	for _, p := range r.drain() {
		switch typ := frameType(p); typ {
		case cmb.TypeHandshake, "x-cmbnode-group-nonce":
		case cmb.TypeError:
			f, _ := cmb.ParseFrame(p)
			codes = append(codes, f.(*cmb.ErrorFrame).Code)
		default:
			t.Errorf("the stranger received a %q frame: %s", typ, cmb.Truncate(string(p), 200))
		}
		for _, l := range leaks {
			if bytes.Contains(p, []byte(l)) {
				t.Errorf("the stranger received plaintext: %s", p)
			}
		}
	}
	return codes
}

func frameType(p []byte) string {
	var h struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(p, &h)
	return h.Type
}

// A victim in private group alpha (rotated to epoch 2 two hours ago, one
// hour of grace) and an honest member exchanging records throughout. Each
// stranger below dials the victim on a fresh host and tries to get in
// without a valid proof; each is refused with an error frame and counted,
// receives nothing but the victim's handshake, nonce and error frames —
// zero records, zero plaintext bytes, on the stream and on the topic —
// leaves no pin in the roster, and the honest traffic keeps flowing.
func TestPrivateGroupRefusesNonMembers(t *testing.T) {
	keys := func() *groupkey.Keyring { return rotatedKeys(t, 2*time.Hour, time.Hour) }
	victim := newMember(t, "alpha", "victim", nil, with(useKeys(keys), func(c *mesh.Config) { c.HandshakeTimeout = 2 * time.Second }))
	honest := newMember(t, "alpha", "honest", []*member{victim}, useKeys(keys))
	waitPeers(t, 1, victim, honest)
	halt := honestTraffic(t, honest)
	secretKey := honest.remember("the private plan is 42", nil, "")
	eventually(t, 10*time.Second, "victim stores the honest record", func() bool { return victim.has(secretKey) })

	epoch1Only := testKeys(t, "alpha") // the old secret: its grace is over
	sameIDWrongSecret := func() *groupkey.Keyring {
		g := testGroup(t, "alpha")
		g.Epochs = []groupkey.Epoch{{N: 2, Secret: groupkey.Secret{1, 2, 3}, Created: time.Now()}}
		k, _ := groupkey.New(g, groupkey.Options{})
		return k
	}()
	otherGroup := func() *groupkey.Keyring { // same name, another group: its own id and secret
		g, _ := groupkey.NewGroup("alpha", time.Now())
		k, _ := groupkey.New(g, groupkey.Options{})
		return k
	}()
	good := keys()
	var stash []byte // a valid proof from an earlier connection, to replay

	cases := []struct {
		name string
		wire string // the handshake's group field; "" is the victim's tag
		act  func(r *rogue)
		want int // the error code the victim sends
	}{
		{"right name, no secret", "alpha", func(r *rogue) {}, cmb.CodeGroupMismatch},
		{"another private group of the same name", groupkey.Tag(otherGroup.ID()), func(r *rogue) {
			r.sendNonce(1)
		}, cmb.CodeGroupMismatch},
		{"skips the proof and sends frames", "", func(r *rogue) {
			r.send(&cmb.Ping{})
			r.sendJSON(map[string]any{"type": "x-cmbnode-fetch-many", "reqId": "1", "keys": []string{secretKey}})
			r.sendJSON(map[string]any{"type": "x-cmbnode-digest-req", "reqId": "2", "from": 0, "to": 1 << 62, "width": 1000})
		}, cmb.CodeAuthFailed},
		{"nonce, then frames instead of a proof", "", func(r *rogue) {
			r.sendNonce(2)
			r.readHello()
			r.sendJSON(map[string]any{"type": "x-cmbnode-keys-req", "reqId": "1", "from": 0, "to": 1 << 62, "limit": 10})
		}, cmb.CodeAuthFailed},
		{"old secret after the grace period", "", func(r *rogue) {
			ours := r.sendNonce(1)
			r.sendProof(1, r.prove(epoch1Only, 1, ours, r.readHello()))
		}, cmb.CodeAuthFailed},
		{"claims the new epoch, proves with the old secret", "", func(r *rogue) {
			ours := r.sendNonce(2)
			theirs := r.readHello()
			mac, _ := epoch1Only.Prove(1, []byte(r.h.ID()), []byte(r.s.Conn().RemotePeer()), ours, theirs)
			r.sendProof(2, mac)
		}, cmb.CodeAuthFailed},
		{"right id, wrong secret", "", func(r *rogue) {
			ours := r.sendNonce(2)
			r.sendProof(2, r.prove(sameIDWrongSecret, 2, ours, r.readHello()))
		}, cmb.CodeAuthFailed},
		{"a proof made with another group's secret", "", func(r *rogue) {
			ours := r.sendNonce(1)
			r.sendProof(1, r.prove(otherGroup, 1, ours, r.readHello()))
		}, cmb.CodeAuthFailed},
		{"tampered proof", "", func(r *rogue) {
			ours := r.sendNonce(2)
			mac := r.prove(good, 2, ours, r.readHello())
			mac[3] ^= 0x10
			r.sendProof(2, mac)
		}, cmb.CodeAuthFailed},
		{"truncated proof", "", func(r *rogue) {
			ours := r.sendNonce(2)
			r.sendProof(2, r.prove(good, 2, ours, r.readHello())[:16])
		}, cmb.CodeAuthFailed},
		{"a valid proof kept back", "", func(r *rogue) {
			ours := r.sendNonce(2)
			stash = r.prove(good, 2, ours, r.readHello()) // as if learnt; not sent
			r.send(&cmb.Ping{})
		}, cmb.CodeAuthFailed},
		{"that proof replayed on a new connection", "", func(r *rogue) {
			r.sendNonce(2)
			r.readHello()
			r.sendProof(2, stash)
		}, cmb.CodeAuthFailed},
		{"an oversized frame for a proof", "", func(r *rogue) {
			r.sendNonce(2)
			r.readHello()
			r.sendJSON(map[string]any{"type": "x-cmbnode-group-proof", "v": 1, "epoch": 2, "mac": strings.Repeat("A", 64<<10)})
		}, cmb.CodeAuthFailed},
		{"silence after the nonce", "", func(r *rogue) { r.sendNonce(2) }, cmb.CodeAuthFailed},
	}
	before := victim.m.Stats()
	proofCases, mismatchCases := 0, 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRogue(t)
			r.dial(victim)
			wire := c.wire
			if wire == "" {
				wire = victim.keys.Tag()
			}
			r.joinTopicNamed("/mmp/1.1.0/group/" + victim.keys.Tag()) // knows the topic: still gets nothing
			r.handshakeAs(r.id.PublicKeyB64(), wire)
			c.act(r)
			if codes := r.refusal("private plan", secretKey); len(codes) != 1 || codes[0] != c.want {
				t.Errorf("error codes %v, want [%d]", codes, c.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			if msg, err := r.sub.Next(ctx); err == nil {
				t.Errorf("the stranger received %d bytes on the topic", len(msg.GetData()))
			}
			cancel()
			if _, err := victim.n.Store().GetPeer(context.Background(), strings.ToLower(r.id.NodeID)); err == nil {
				t.Error("the stranger was pinned in the roster")
			}
			victimID, _ := peer.Decode(victim.m.PeerID())
			eventually(t, 5*time.Second, "the victim closes the connection", func() bool {
				return r.h.Network().Connectedness(victimID) != 1 // network.Connected
			})
		})
		if c.want == cmb.CodeGroupMismatch {
			mismatchCases++
		} else {
			proofCases++
		}
	}
	after := victim.m.Stats()
	if got := after.ProofsFailed - before.ProofsFailed; got != int64(proofCases) {
		t.Errorf("victim counted %d failed proofs, want %d", got, proofCases)
	}
	if got := after.GroupMismatches - before.GroupMismatches; got != int64(mismatchCases) {
		t.Errorf("victim counted %d group mismatches, want %d", got, mismatchCases)
	}
	if n := victim.n.Counters.Rejected()["group-proof"]; n != int64(proofCases) {
		t.Errorf("group-proof rejections %d, want %d", n, proofCases)
	}
	if victim.m.PeerCount() != 1 {
		t.Errorf("victim has %d peers, want only the honest one", victim.m.PeerCount())
	}
	victim.storesAll(t, halt())
}

// A stranger that knows the topic connects to a member and subscribes,
// but never opens an /mmp stream, so it never proves anything. It stays
// connected while the member authors records (flood-published to every
// admitted subscriber) and relays an honest member's: it receives no
// message on the topic at all, and the honest traffic keeps flowing.
func TestTopicSubscriberWithoutProofReceivesNothing(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	r := newRogue(t)
	ai, err := peer.AddrInfoFromString(victim.m.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	r.joinTopic("alpha")
	halt := honestTraffic(t, honest)
	var own []string
	for i := range 20 {
		own = append(own, victim.remember(fmt.Sprintf("the victim's secret note %d", i), nil, ""))
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 10*time.Second, "the honest member stores the victim's records", func() bool {
		for _, k := range own {
			if !honest.has(k) {
				return false
			}
		}
		return true
	})
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	defer rcancel()
	if msg, err := r.sub.Next(rctx); err == nil {
		t.Fatalf("the subscriber without a proof received %d bytes on the topic from %s", len(msg.GetData()), msg.ReceivedFrom)
	}
	victim.storesAll(t, halt())
}

// A member's valid proof from one connection, replayed by the same peer
// on its next connection (the victim's nonce is new), is refused with
// error 1006 and counted, and that session gets nothing of the group.
func TestProofReplayedOnANewConnection(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	secretKey := victim.remember("held before the replay", nil, "")
	r := newRogue(t)
	r.dial(victim)
	k := testKeys(t, "alpha")
	r.handshake(r.id.PublicKeyB64(), "alpha")
	ours := r.sendNonce(1)
	mac := r.prove(k, 1, ours, r.readHello())
	r.sendProof(1, mac)
	if f := r.readRaw(); !strings.Contains(string(f), "x-cmbnode-group-proof") {
		t.Fatalf("the victim answered an honest proof with %s", f)
	}
	eventually(t, 10*time.Second, "the victim admits the first connection", func() bool { return victim.m.PeerCount() == 1 })
	victimID, _ := peer.Decode(victim.m.PeerID())
	_ = r.h.Network().ClosePeer(victimID)
	eventually(t, 10*time.Second, "the victim drops the first connection", func() bool { return victim.m.PeerCount() == 0 })

	before := victim.m.Stats().ProofsFailed
	r.dial(victim)
	r.handshake(r.id.PublicKeyB64(), "alpha")
	r.sendNonce(1)
	r.readHello()
	r.sendProof(1, mac)
	if codes := r.refusal(secretKey, "held before the replay"); len(codes) != 1 || codes[0] != cmb.CodeAuthFailed {
		t.Fatalf("a replayed proof got error codes %v, want [%d]", codes, cmb.CodeAuthFailed)
	}
	if got := victim.m.Stats().ProofsFailed - before; got != 1 {
		t.Errorf("victim counted %d failed proofs, want 1", got)
	}
	if victim.m.PeerCount() != 0 {
		t.Errorf("the replaying peer is admitted")
	}
}

// A member relaying gossip forwards only envelopes: a member connected
// only to the relay captures every gossip message the relay forwards
// and finds none of the records' plaintext — fields, key, author — in
// them, though its own copy of the secret opens each one to the record.
// Records fetched from the relay are sealed too.
func TestPrivateGossipCarriesNoPlaintext(t *testing.T) {
	a := newMember(t, "alpha", "author", nil, nil)
	relay := newMember(t, "alpha", "relay", []*member{a}, nil)
	waitPeers(t, 1, a, relay)
	r := newRogue(t)
	r.dial(relay)
	r.join("alpha")
	records := make(chan []byte, 4)
	go func() { // answer pings; hand records answers to the test
		for {
			p, err := cmb.ReadFrame(r.s, nil)
			if err != nil {
				return
			}
			switch frameType(p) {
			case cmb.TypePing:
				pp, _ := cmb.MarshalFrame(&cmb.Pong{})
				_ = cmb.WriteFrame(r.s, pp)
			case "x-cmbnode-records":
				records <- p
			}
		}
	}()
	r.joinTopic("alpha")
	eventually(t, 10*time.Second, "the relay admits the capturing member", func() bool { return relay.m.PeerCount() == 2 })
	relayID, _ := peer.Decode(relay.m.PeerID())
	eventually(t, 20*time.Second, "the relay grafts the author and the capturing member", func() bool { return relay.m.Stats().GossipMesh == 2 })

	const marker = "zebra-orchid-7311"
	var keys []string
	for i := range 5 {
		keys = append(keys, a.remember(fmt.Sprintf("%s focus %d", marker, i), nil, ""))
	}
	eventually(t, 10*time.Second, "the relay stores them", func() bool {
		for _, k := range keys {
			if !relay.has(k) {
				return false
			}
		}
		return true
	})
	opened := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for len(opened) < len(keys) {
		msg, err := r.sub.Next(ctx)
		if err != nil {
			t.Fatalf("captured %d of %d records from the relay: %v", len(opened), len(keys), err)
		}
		if msg.ReceivedFrom != relayID {
			continue
		}
		data := msg.GetData()
		for _, leak := range []string{marker, "focus", a.nodeID(), "cmb1-", `"type"`} {
			if bytes.Contains(data, []byte(leak)) {
				t.Fatalf("a forwarded gossip message carries %q in clear", leak)
			}
		}
		if !groupkey.IsEnvelope(data) {
			t.Fatalf("a forwarded gossip message is no envelope: % x", data[:16])
		}
		plain, epoch, err := r.keys.Open(groupkey.KindGossip, "", data)
		if err != nil || epoch != 1 {
			t.Fatalf("the member's key does not open the envelope: %v", err)
		}
		f, err := cmb.ParseFrame(plain)
		if err != nil {
			t.Fatal(err)
		}
		rec := f.(*cmb.CMBFrame).CMB
		stored, err := a.n.Store().Get(context.Background(), rec.Key)
		if err != nil || !bytes.Equal(rec.Encode(), stored.Raw) {
			t.Fatalf("the record inside the envelope is not the author's, byte for byte: %v", err)
		}
		if err := rec.VerifyAddress(); err != nil || !strings.HasPrefix(rec.Key, "cmb1-") {
			t.Fatalf("the record inside the envelope lost its cmb1- key: %s %v", rec.Key, err)
		}
		if err := rec.VerifySignature(a.n.Identity().PublicKey()); err != nil {
			t.Fatalf("the record inside the envelope lost its signature: %v", err)
		}
		opened[rec.Key] = true
	}
	for _, k := range keys {
		if !opened[k] {
			t.Errorf("record %s was not among the forwarded messages", k)
		}
	}

	// Fetched from the relay: one sealed box per key, nothing in clear.
	r.sendJSON(map[string]any{"type": "x-cmbnode-fetch-many", "reqId": "f1", "keys": keys})
	for {
		var p []byte
		select {
		case p = <-records:
		case <-time.After(10 * time.Second):
			t.Fatal("the relay did not answer the fetch")
		}
		if bytes.Contains(p, []byte(marker)) || bytes.Contains(p, []byte(a.nodeID())) {
			t.Fatalf("fetched records carry plaintext: %s", cmb.Truncate(string(p), 300))
		}
		var res struct {
			Records []struct {
				Key string `json:"key"`
				Box []byte `json:"box"`
			} `json:"records"`
		}
		if err := json.Unmarshal(p, &res); err != nil || len(res.Records) != len(keys) {
			t.Fatalf("records answer: %d records, %v", len(res.Records), err)
		}
		for _, fr := range res.Records {
			plain, _, err := r.keys.Open(groupkey.KindRecord, fr.Key, fr.Box)
			if err != nil || !bytes.Contains(plain, []byte(marker)) {
				t.Fatalf("box for %s does not open to the record: %v", fr.Key, err)
			}
			var inner struct {
				CMB json.RawMessage `json:"cmb"`
			}
			stored, serr := a.n.Store().Get(context.Background(), fr.Key)
			if err := json.Unmarshal(plain, &inner); err != nil || serr != nil || !bytes.Equal(inner.CMB, stored.Raw) {
				t.Fatalf("box for %s does not hold the stored record byte for byte: %v %v", fr.Key, err, serr)
			}
			if _, _, err := r.keys.Open(groupkey.KindRecord, keys[0]+"x", fr.Box); err == nil {
				t.Fatal("a box opened for another key")
			}
		}
		break
	}
}

// Rotation with secrets in the homes: a rotates, b joins the new epoch
// and both move to it as the file appears (no periodic re-read); c holds only the old secret and is served within
// the grace period (by catch-up: the new gossip is sealed under a secret
// it lacks), then refused by both and given nothing more. A member of
// another private group of the same name, and a public member of that
// name, are never admitted.
func TestRotationMovesMembersAndRefusesTheOldSecret(t *testing.T) {
	const grace = 4 * time.Second
	aHome := t.TempDir()
	g, err := groupkey.Create(aHome, "alpha", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	homeKeys := func(home string) *groupkey.Keyring {
		if home != aHome {
			if _, err := groupkey.Join(home, "alpha", g.ID, g.Epochs[0], false); err != nil {
				t.Fatal(err)
			}
		}
		k, err := groupkey.Load(home, "alpha", groupkey.Options{Grace: grace})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	// No periodic re-read within the test: the members load the new epoch
	// as its file appears, and end c's sessions as the grace ends.
	noPoll := func(c *mesh.Config) { c.KeyReload = time.Hour }
	start := func(name, home string, peers []*member) *member {
		mb := newMemberIn(t, home, "alpha", name, homeKeys(home), noPoll)
		mb.start(peers)
		return mb
	}
	bHome, cHome := t.TempDir(), t.TempDir()
	a := start("a", aHome, nil)
	b := start("b", bHome, []*member{a})
	c := start("c", cHome, []*member{a, b})
	waitPeers(t, 2, a, b, c)

	other := newMember(t, "alpha", "other-group", []*member{a}, useKeys(func() *groupkey.Keyring {
		og, _ := groupkey.NewGroup("alpha", time.Now())
		k, _ := groupkey.New(og, groupkey.Options{})
		return k
	}))
	pub := newMember(t, "alpha", "public", []*member{a}, public)

	first := a.remember("before the rotation", nil, "")
	eventually(t, 10*time.Second, "b and c store the first record", func() bool { return b.has(first) && c.has(first) })

	_, e2, err := groupkey.Rotate(aHome, "alpha", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	if _, err := groupkey.Join(bHome, "alpha", g.ID, e2, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a and b reload epoch 2", func() bool { return a.keys.Current() == 2 && b.keys.Current() == 2 })
	during := a.remember("during the grace period", nil, "")
	eventually(t, 10*time.Second, "b stores it by gossip, c by catch-up at epoch 1", func() bool { return b.has(during) && c.has(during) })
	if time.Since(rotated) > grace {
		t.Fatalf("the grace period ended before the check (%s)", time.Since(rotated))
	}

	eventually(t, 20*time.Second, "a and b end their sessions with c", func() bool {
		return a.m.PeerCount() == 1 && b.m.PeerCount() == 1 && c.m.PeerCount() == 0
	})
	if s := a.m.Stats().EpochsExpired + b.m.Stats().EpochsExpired; s < 1 {
		t.Errorf("no session was ended for its expired epoch: %d", s)
	}
	cBefore := c.n.Counters.Snapshot()
	after := a.remember("after the grace period", nil, "")
	eventually(t, 10*time.Second, "b stores the record after the grace", func() bool { return b.has(after) })
	time.Sleep(4 * time.Second) // a catch-up round (3 s in tests) and a redial would have delivered it
	if c.has(after) || c.m.PeerCount() != 0 {
		t.Fatalf("c, holding only the old secret, got in after the grace (peers %d)", c.m.PeerCount())
	}
	if s := c.n.Counters.Snapshot(); s.Received != cBefore.Received {
		t.Errorf("c received %d records after the grace", s.Received-cBefore.Received)
	}
	// The records of epoch 1 stay readable where they were stored.
	if !c.has(first) || !a.has(first) {
		t.Error("records of the old epoch are gone")
	}
	for _, mb := range []*member{other, pub} {
		if mb.m.PeerCount() != 0 || mb.n.Store().Count() != 0 {
			t.Errorf("%s was admitted or holds records: peers %d, records %d", mb.n.Identity().Name, mb.m.PeerCount(), mb.n.Store().Count())
		}
	}
}

// A public group behaves as MMP without groups' secrets: two public
// members meet by name and deliver; a private member of that name does
// not meet them.
func TestPublicGroup(t *testing.T) {
	p1 := newMember(t, "alpha", "p1", nil, public)
	p2 := newMember(t, "alpha", "p2", []*member{p1}, public)
	priv := newMember(t, "alpha", "private", []*member{p1, p2}, nil)
	waitPeers(t, 1, p1, p2)
	key := p1.remember("public record", nil, "")
	eventually(t, 10*time.Second, "p2 stores the public record", func() bool { return p2.has(key) })
	time.Sleep(500 * time.Millisecond)
	if priv.m.PeerCount() != 0 || priv.has(key) {
		t.Fatalf("the private member met the public group: peers %d", priv.m.PeerCount())
	}
}
