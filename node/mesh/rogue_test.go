package mesh_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multiaddr"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// rogue is a raw libp2p host that speaks /mmp/1.1.0 and the group topic by
// hand, so a test can send what an honest node never would.
type rogue struct {
	t     *testing.T
	id    *identity.Identity
	h     host.Host
	s     network.Stream
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	// keys, once the rogue has proved membership with them, seal what it
	// publishes on the topic.
	keys *groupkey.Keyring
}

func newRogue(t *testing.T) *rogue {
	t.Helper()
	id, err := identity.Create(t.TempDir(), "rogue", nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := crypto.UnmarshalEd25519PrivateKey(id.Ed25519)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(priv), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay(), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &rogue{t: t, id: id, h: h}
}

func (r *rogue) dial(victim *member) {
	r.t.Helper()
	ai, err := peer.AddrInfoFromString(victim.m.Addrs()[0])
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.h.Connect(ctx, *ai); err != nil {
		r.t.Fatal(err)
	}
	if r.s, err = r.h.NewStream(ctx, ai.ID, mesh.ProtocolID); err != nil {
		r.t.Fatal(err)
	}
}

// handshake sends a handshake into the test's private group grp (its tag).
func (r *rogue) handshake(publicKey, grp string) {
	r.t.Helper()
	r.handshakeAs(publicKey, groupkey.Tag(testGroup(r.t, grp).ID))
}

// handshakeAs sends a handshake whose group field is exactly wire.
func (r *rogue) handshakeAs(publicKey, wire string) {
	r.t.Helper()
	r.send(&cmb.Handshake{
		NodeID: r.id.NodeID, Name: "rogue", Version: cmb.ProtocolVersion, PublicKey: publicKey,
		E2EPublicKey: r.id.E2EPublicKeyDER(), Group: wire, LifecycleRole: "participant",
	})
}

// join handshakes into the test's private group grp and proves
// membership honestly, as a member that turns rogue afterwards would.
func (r *rogue) join(grp string) {
	r.t.Helper()
	k := testKeys(r.t, grp)
	r.handshake(r.id.PublicKeyB64(), grp)
	ours := r.sendNonce(k.Current())
	theirs := r.readHello()
	r.sendProof(1, r.prove(k, 1, ours, theirs))
	if f := r.readRaw(); !strings.Contains(string(f), "x-cmbnode-group-proof") {
		r.t.Fatalf("the victim answered the proof with %s", f)
	}
	r.keys = k
}

type nonceFrame struct {
	Type  string `json:"type"`
	V     int    `json:"v"`
	Epoch uint32 `json:"epoch"`
	Nonce []byte `json:"nonce"`
}

type proofFrame struct {
	Type  string `json:"type"`
	V     int    `json:"v"`
	Epoch uint32 `json:"epoch"`
	MAC   []byte `json:"mac"`
}

func (r *rogue) sendJSON(v any) {
	r.t.Helper()
	p, err := json.Marshal(v)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cmb.WriteFrame(r.s, p); err != nil {
		r.t.Fatal(err)
	}
}

// sendNonce sends a fresh nonce frame claiming epoch; it returns the nonce.
func (r *rogue) sendNonce(epoch uint32) []byte {
	r.t.Helper()
	n, err := groupkey.NewNonce()
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendJSON(nonceFrame{Type: "x-cmbnode-group-nonce", V: 1, Epoch: epoch, Nonce: n[:]})
	return n[:]
}

func (r *rogue) sendProof(epoch uint32, mac []byte) {
	r.t.Helper()
	r.sendJSON(proofFrame{Type: "x-cmbnode-group-proof", V: 1, Epoch: epoch, MAC: mac})
}

// readRaw reads one frame from the victim (within 10 s).
func (r *rogue) readRaw() []byte {
	r.t.Helper()
	_ = r.s.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := cmb.ReadFrame(r.s, nil)
	if err != nil {
		r.t.Fatalf("reading from the victim: %v", err)
	}
	return p
}

// readHello reads the victim's handshake and nonce frames and returns its nonce.
func (r *rogue) readHello() []byte {
	r.t.Helper()
	if f, err := cmb.ParseFrame(r.readRaw()); err != nil || f.FrameType() != cmb.TypeHandshake {
		r.t.Fatalf("victim's first frame: %v %v", f, err)
	}
	var n nonceFrame
	if err := json.Unmarshal(r.readRaw(), &n); err != nil || n.Type != "x-cmbnode-group-nonce" {
		r.t.Fatalf("victim's second frame is no nonce: %+v %v", n, err)
	}
	return n.Nonce
}

// prove computes the rogue's proof with k at epoch for this connection.
func (r *rogue) prove(k *groupkey.Keyring, epoch uint32, ours, theirs []byte) []byte {
	r.t.Helper()
	mac, err := k.Prove(epoch, []byte(r.h.ID()), []byte(r.s.Conn().RemotePeer()), ours, theirs)
	if err != nil {
		r.t.Fatal(err)
	}
	return mac
}

func (r *rogue) send(f cmb.Frame) {
	r.t.Helper()
	p, err := cmb.MarshalFrame(f)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cmb.WriteFrame(r.s, p); err != nil {
		r.t.Fatal(err)
	}
}

// readAll returns every frame the victim sends until it closes the stream.
func (r *rogue) readAll() []cmb.Frame {
	_ = r.s.SetReadDeadline(time.Now().Add(15 * time.Second))
	var out []cmb.Frame
	for {
		p, err := cmb.ReadFrame(r.s, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
				r.t.Logf("reading from victim: %v", err)
			}
			return out
		}
		if f, err := cmb.ParseFrame(p); err == nil {
			out = append(out, f)
		}
	}
}

// serve answers pings so the victim keeps the session while the test runs.
func (r *rogue) serve() {
	go func() {
		for {
			p, err := cmb.ReadFrame(r.s, nil)
			if err != nil {
				return
			}
			if f, err := cmb.ParseFrame(p); err == nil && f.FrameType() == cmb.TypePing {
				pp, _ := cmb.MarshalFrame(&cmb.Pong{})
				_ = cmb.WriteFrame(r.s, pp)
			}
		}
	}()
}

// joinTopic subscribes to the test's private group grp's topic.
func (r *rogue) joinTopic(grp string) {
	r.t.Helper()
	r.joinTopicNamed(topicOf(r.t, grp))
}

// joinTopicNamed subscribes to exactly topic.
func (r *rogue) joinTopicNamed(topic string) {
	r.t.Helper()
	ps, err := pubsub.NewGossipSub(context.Background(), r.h,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign), pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(func(m *pb.Message) string { s := sha256.Sum256(m.GetData()); return string(s[:]) }),
		pubsub.WithMaxMessageSize(cmb.MaxFrameSize+groupkey.Overhead+64<<10), pubsub.WithFloodPublish(true), pubsub.WithLogger(logger(r.t).With("who", "rogue")),
		pubsub.WithPeerOutboundQueueSize(1024)) // room for a burst of forgeries
	if err != nil {
		r.t.Fatal(err)
	}
	if r.topic, err = ps.Join(topic); err != nil {
		r.t.Fatal(err)
	}
	sub, err := r.topic.Subscribe()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(sub.Cancel)
	r.ps, r.sub = ps, sub
}

// publish publishes payload on the topic, sealed for the group once the
// rogue has proved membership (as a member's records travel).
func (r *rogue) publish(payload []byte) {
	r.t.Helper()
	if r.keys != nil {
		var err error
		if payload, err = r.keys.Seal(groupkey.KindGossip, "", payload); err != nil {
			r.t.Fatal(err)
		}
	}
	r.publishRaw(payload)
}

// publishRaw publishes payload as it is.
func (r *rogue) publishRaw(payload []byte) {
	r.t.Helper()
	if err := r.topic.Publish(context.Background(), payload); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rogue) build(focus, grp, createdBy string) *cmb.Record {
	r.t.Helper()
	var f cmb.Fields
	f[cmb.Focus].Text = focus
	rec, err := cmb.Build(cmb.Draft{Fields: f, Group: grp, CreatedBy: createdBy, CreatedAt: time.Now().UnixMilli()}, r.id.Ed25519)
	if err != nil {
		r.t.Fatal(err)
	}
	return rec
}

func frameOf(t *testing.T, rec *cmb.Record, pub string) []byte {
	t.Helper()
	p, err := cmb.MarshalFrame(&cmb.CMBFrame{Timestamp: time.Now().UnixMilli(), CMB: rec, PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A handshaken member that publishes forgeries on the topic, and a host
// whose handshake key is not its libp2p key: each is rejected and counted,
// nothing of theirs is stored, and honest traffic keeps flowing.
func TestMisbehavingPeer(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)

	// A handshake whose publicKey is not the connection's key: 1006, closed.
	liar := newRogue(t)
	liar.dial(victim)
	liar.handshake(honest.n.Identity().PublicKeyB64(), "alpha")
	var codes []int
	for _, f := range liar.readAll() {
		if e, ok := f.(*cmb.ErrorFrame); ok {
			codes = append(codes, e.Code)
		}
	}
	if len(codes) != 1 || codes[0] != cmb.CodeAuthFailed {
		t.Fatalf("liar got error codes %v, want [%d]", codes, cmb.CodeAuthFailed)
	}

	// The rogue handshakes honestly and then misbehaves on the topic.
	r := newRogue(t)
	r.dial(victim)
	r.join("alpha")
	r.serve()
	r.joinTopic("alpha")
	victimID, _ := peer.Decode(victim.m.PeerID())
	eventually(t, 10*time.Second, "rogue sees the victim on the topic", func() bool {
		for _, p := range r.ps.ListPeers(topicOf(t, "alpha")) {
			if p == victimID {
				return true
			}
		}
		return false
	})
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == 2 })

	t.Logf("%s publishing forgeries, topic peers %v", time.Now().Format("05.000"), r.ps.ListPeers(topicOf(t, "alpha")))
	rogueKey := r.id.PublicKeyB64()
	honestID := honest.nodeID()
	var forged []string

	badSig := r.build("bad signature", "alpha", r.id.NodeID)
	badSig.Sig = flip(badSig.Sig)
	forged = append(forged, badSig.Key)
	r.publish(frameOf(t, badSig, rogueKey))

	relabelled := r.build("relabelled author", "alpha", r.id.NodeID)
	relabelled.CreatedBy = honestID // the victim checks it against honest's pinned key
	forged = append(forged, relabelled.Key)
	r.publish(frameOf(t, relabelled, ""))

	wrongGroup := r.build("wrong group", "beta", r.id.NodeID)
	forged = append(forged, wrongGroup.Key)
	r.publish(frameOf(t, wrongGroup, rogueKey))

	conflicting := r.build("conflicting key", "alpha", honestID) // signed by the rogue, claims honest
	forged = append(forged, conflicting.Key)
	r.publish(frameOf(t, conflicting, rogueKey))

	mismatch := r.build("key and fields agree", "alpha", r.id.NodeID)
	mismatch.Fields[cmb.Focus].Text = "fields swapped after signing"
	forged = append(forged, mismatch.Key)
	r.publish(frameOf(t, mismatch, rogueKey))

	big := make([]byte, cmb.MaxFrameSize+100)
	copy(big, `{"type":"cmb","cmb":{"key":"`)
	for i := 30; i < len(big); i++ {
		big[i] = 'a'
	}
	r.publish(big)

	r.publish([]byte(`{"type":"ping"}`)) // a frame that is not a cmb

	want := map[string]int64{
		"bad-signature": 2, "wrong-group": 1, "key-conflict": 1, "address-mismatch": 1,
		"too-large": 1, "bad-frame": 1, "handshake-key-mismatch": 1,
	}
	defer func() { t.Logf("victim rejections: %v, stats %+v", victim.n.Counters.Rejected(), victim.m.Stats()) }()
	eventually(t, 10*time.Second, "every forgery rejected and counted", func() bool {
		got := victim.n.Counters.Rejected()
		for reason, n := range want {
			if got[reason] < n {
				return false
			}
		}
		return true
	})
	t.Logf("victim rejections: %v", victim.n.Counters.Rejected())
	if victim.n.Counters.KeyConflicts.Load() < 1 {
		t.Error("the conflicting author key was not counted as a key conflict")
	}
	for _, k := range forged {
		if victim.has(k) {
			t.Errorf("victim stored forged record %s", k)
		}
	}

	// A spy that subscribes to the topic without handshaking gets nothing.
	spy := newRogue(t)
	spy.dial(honest) // the publisher: flood publishing must skip it
	spy.joinTopic("alpha")
	eventually(t, 10*time.Second, "the spy's subscription reaches the victim", func() bool {
		return len(spy.ps.ListPeers(topicOf(t, "alpha"))) > 0
	})
	time.Sleep(1500 * time.Millisecond) // a GossipSub heartbeat, in which the spy could be grafted

	// Honest traffic still flows, and so does the rogue's own valid record.
	key := honest.remember("still flowing", nil, "")
	eventually(t, 10*time.Second, "victim stores honest traffic after the attack", func() bool { return victim.has(key) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	if msg, err := spy.sub.Next(ctx); err == nil {
		t.Errorf("an unhandshaken subscriber received %d bytes from %s", len(msg.GetData()), msg.ReceivedFrom)
	}
	cancel()
	valid := r.build("the rogue's own valid record", "alpha", r.id.NodeID)
	r.publish(frameOf(t, valid, rogueKey))
	eventually(t, 10*time.Second, "a valid record from the rogue member is accepted", func() bool { return victim.has(valid.Key) })
	for _, k := range forged {
		if victim.has(k) || honest.has(k) {
			t.Errorf("forged record %s stored after all", k)
		}
	}
}

func flip(s string) string {
	b := []byte(s)
	if b[10] == 'A' {
		b[10] = 'B'
	} else {
		b[10] = 'A'
	}
	return string(b)
}

// A handshaken member that keeps publishing records with bad signatures is
// scored down by the victim's GossipSub: pruned from its mesh, then below
// the graylist threshold so its RPCs are dropped unread — while an honest
// member's records keep arriving throughout, and every rejection before the
// graylist is still counted by reason.
func TestRejectedGossipGraylistsSender(t *testing.T) {
	victim := newMember(t, "alpha", "victim", nil, nil)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)

	r := newRogue(t)
	r.dial(victim)
	r.join("alpha")
	r.serve()
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == 2 })
	r.joinTopic("alpha")
	rogueID := r.h.ID().String()
	// Both members in the victim's mesh: pruning the rogue is then observable.
	eventually(t, 20*time.Second, "victim grafts honest and rogue", func() bool { return victim.m.Stats().GossipMesh == 2 })
	if s, ok := victim.m.GossipScore(rogueID); ok && s < 0 {
		t.Fatalf("the rogue scores %v before it misbehaved", s)
	}

	halt := honestTraffic(t, honest)

	const forgeries = 40
	for i := range forgeries {
		rec := r.build(fmt.Sprintf("forgery %d", i), "alpha", r.id.NodeID)
		rec.Sig = flip(rec.Sig)
		r.publish(frameOf(t, rec, r.id.PublicKeyB64()))
	}
	defer func() {
		s, _ := victim.m.GossipScore(rogueID)
		t.Logf("rogue score %v, victim rejections %v, stats %+v", s, victim.n.Counters.Rejected(), victim.m.Stats())
	}()
	eventually(t, 20*time.Second, "the rogue's score falls below the graylist threshold", func() bool {
		s, ok := victim.m.GossipScore(rogueID)
		return ok && s < -1000 && victim.m.Stats().GossipGraylisted == 1
	})
	eventually(t, 20*time.Second, "the rogue is pruned from the victim's mesh", func() bool { return victim.m.Stats().GossipMesh == 1 })
	if s, ok := victim.m.GossipScore(honest.m.PeerID()); !ok || s < 0 {
		t.Errorf("honest member scores %v (tracked %v), want >= 0", s, ok)
	}
	// Rejections are counted as before: every forgery validated before the
	// graylist, at least the eleven it takes to get there.
	if n := victim.n.Counters.Rejected()["bad-signature"]; n < 11 || n > forgeries {
		t.Errorf("victim counted %d bad-signature rejections, want 11..%d", n, forgeries)
	}
	// An honest record published now arrives after whatever the rogue sent
	// before it has been validated.
	barrier := honest.remember("honest after the graylist", nil, "")
	eventually(t, 10*time.Second, "victim stores the honest record published after the graylist", func() bool { return victim.has(barrier) })
	rejected := victim.n.Counters.Rejected()["bad-signature"]

	// Graylisted, the rogue's RPCs are dropped unread: neither more
	// forgeries nor a valid record of its own reach the validator, while an
	// honest record published after them arrives.
	for i := range 10 {
		rec := r.build(fmt.Sprintf("forgery after the graylist %d", i), "alpha", r.id.NodeID)
		rec.Sig = flip(rec.Sig)
		r.publish(frameOf(t, rec, r.id.PublicKeyB64()))
	}
	valid := r.build("valid but graylisted", "alpha", r.id.NodeID)
	r.publish(frameOf(t, valid, r.id.PublicKeyB64()))
	after := honest.remember("honest after the graylisted records", nil, "")
	eventually(t, 10*time.Second, "victim stores the honest record published after the graylisted ones", func() bool { return victim.has(after) })
	if victim.has(valid.Key) {
		t.Error("victim stored a record from a graylisted peer")
	}
	if n := victim.n.Counters.Rejected()["bad-signature"]; n != rejected {
		t.Errorf("victim validated %d forgeries from a graylisted peer", n-rejected)
	}
	victim.storesAll(t, halt())
}

// honestTraffic has mb remember a record at once and then every 50 ms until
// the returned function is called, and one more then, so the records span
// everything the test did in between; that function returns the keys
// remembered. It is also a cleanup, registered after the members so it runs
// before they close.
func honestTraffic(t *testing.T, mb *member) (halt func() []string) {
	stop := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var keys []string
	halt = func() []string {
		once.Do(func() { close(stop) })
		wg.Wait()
		return keys
	}
	t.Cleanup(func() { halt() })
	wg.Go(func() {
		stopping := false
		for i := 0; ; i++ {
			var f cmb.Fields
			f[cmb.Focus].Text = fmt.Sprintf("honest during the attack %d", i)
			res, err := mb.n.Remember(context.Background(), node.RememberInput{Fields: f})
			if err != nil {
				t.Errorf("honest remember %d: %v", i, err)
				return
			}
			keys = append(keys, res.Key)
			if stopping {
				return
			}
			select {
			case <-stop:
				stopping = true
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	return halt
}

// storesAll waits until mb stores every key of the honest traffic.
func (mb *member) storesAll(t *testing.T, keys []string) {
	t.Helper()
	if len(keys) == 0 {
		t.Fatal("no honest records were published during the attack")
	}
	t.Logf("%d honest records published during the attack", len(keys))
	eventually(t, 10*time.Second, fmt.Sprintf("victim stores all %d honest records published during the attack", len(keys)), func() bool {
		for _, k := range keys {
			if !mb.has(k) {
				return false
			}
		}
		return true
	})
}

// A rogue member floods peer-info: 10,000 addresses on loopback ports
// nobody listens on — one entry with 5,000 addresses of one peer, and 500
// entries whose ten addresses each name a different peer — plus entries for
// the victim itself and for a peer it is already connected to. The victim
// acts on at most 64 entries a frame, one peer and 8 addresses an entry, 4
// peers that never handshook here per advertiser a minute, 16 dials at
// once; never dials a connected peer; and honest traffic keeps flowing.
func TestPeerInfoFloodDialsBounded(t *testing.T) {
	w := newDialWatch()
	victim := newMember(t, "alpha", "victim", nil, w.install)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)

	r := newRogue(t)
	r.dial(victim)
	r.join("alpha")
	r.serve()
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == 2 })
	halt := honestTraffic(t, honest)

	ports := deadPorts(t, 16)
	addr := func(i int, id peer.ID) string {
		return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", ports[i%len(ports)], id)
	}
	total := 0
	one := randomPeerID(t)
	big := cmb.PeerEntry{NodeID: "one-peer-many-addresses", Name: "big"}
	for i := range 5000 {
		big.Addrs = append(big.Addrs, addr(i, one))
	}
	total += len(big.Addrs)
	r.send(&cmb.PeerInfo{Peers: []cmb.PeerEntry{
		{NodeID: "victim-itself", Addrs: victim.m.Addrs()},
		{NodeID: honest.nodeID(), Addrs: honest.m.Addrs()},
		big,
	}})
	for f := range 5 {
		var entries []cmb.PeerEntry
		for e := range 100 {
			entry := cmb.PeerEntry{NodeID: fmt.Sprintf("many-peers-%d-%d", f, e)}
			for i := range 10 {
				entry.Addrs = append(entry.Addrs, addr(i, randomPeerID(t)))
			}
			total += len(entry.Addrs)
			entries = append(entries, entry)
		}
		r.send(&cmb.PeerInfo{Peers: entries})
	}
	t.Logf("the rogue advertised %d addresses", total)

	// Each frame's first 64 entries name a new peer (the first frame one):
	// every one is either dialled or dropped, none is skipped.
	const candidates = 1 + 5*64
	defer func() { t.Logf("victim stats %+v, max in flight %d", victim.m.Stats(), w.maxInFlight) }()
	eventually(t, 30*time.Second, "victim has acted on every advertised peer it considers", func() bool {
		s := victim.m.Stats()
		return s.PeerInfoDials+s.PeerInfoDialsDropped >= candidates
	})
	eventually(t, 30*time.Second, "every peer-info dial has ended", w.idle)
	s := victim.m.Stats()
	w.mu.Lock()
	defer w.mu.Unlock()
	dials := 0
	for id, n := range w.dialled {
		dials += n
		if n > 1 {
			t.Errorf("peer %s dialled %d times", id, n)
		}
	}
	if int64(dials) != s.PeerInfoDials {
		t.Errorf("the hook saw %d dials, stats count %d", dials, s.PeerInfoDials)
	}
	if s.PeerInfoDials+s.PeerInfoDialsDropped != candidates {
		t.Errorf("%d dialled + %d dropped, want %d advertised peers acted on", s.PeerInfoDials, s.PeerInfoDialsDropped, candidates)
	}
	if dials > 4 {
		t.Errorf("victim dialled %d advertised strangers for one advertiser, want at most 4 a minute", dials)
	}
	if w.maxInFlight > 16 {
		t.Errorf("%d peer-info dials ran at once, want at most 16", w.maxInFlight)
	}
	if w.maxAddrs > 8 {
		t.Errorf("a peer-info dial tried %d addresses, want at most 8", w.maxAddrs)
	}
	for _, id := range []string{victim.m.PeerID(), honest.m.PeerID()} {
		pid, _ := peer.Decode(id)
		if w.dialled[pid] > 0 {
			t.Errorf("victim dialled %s, which is itself or already connected", id)
		}
	}
	victim.storesAll(t, halt())
}

// deadPorts returns n loopback TCP ports nobody listens on: each was bound
// and released, so a dial to it is refused at once and leaves no host.
func deadPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	return ports
}

func randomPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A rogue member uses peer-info as a dial amplifier: over several sessions
// (each used to get a fresh budget) it advertises peers that never
// handshook with the victim, every address a port it chose (listeners
// here, counting the TCP connections the victim opens). The victim dials
// at most peerInfoStrangers such peers for that advertiser in a window —
// however many sessions it opens — so the port sees at most 4 peers × 8
// addresses × 2 tries; the bound is counted, and honest traffic flows.
func TestPeerInfoAmplifierBounded(t *testing.T) {
	w := newDialWatch()
	victim := newMember(t, "alpha", "victim", nil, w.install)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)

	ports, accepted := countingPorts(t, 8)

	r := newRogue(t)
	r.dial(victim)
	r.join("alpha")
	answerPings(r.s)
	eventually(t, 10*time.Second, "victim admits the rogue", func() bool { return victim.m.PeerCount() == 2 })
	halt := honestTraffic(t, honest)

	const sessions, entries = 4, 64
	for s := range sessions {
		if s > 0 {
			r.reopen()
			r.join("alpha")
			answerPings(r.s)
		}
		var pe []cmb.PeerEntry
		for e := range entries {
			id := randomPeerID(t)
			entry := cmb.PeerEntry{NodeID: fmt.Sprintf("stranger-%d-%d", s, e)}
			for _, p := range ports {
				entry.Addrs = append(entry.Addrs, fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", p, id))
			}
			pe = append(pe, entry)
		}
		r.send(&cmb.PeerInfo{Peers: pe})
		// Let the dials of this session run, so the next one finds free
		// slots: what is measured is the budget, not the concurrency cap.
		eventually(t, 30*time.Second, "victim acted on this session's peer-info", func() bool {
			st := victim.m.Stats()
			return st.PeerInfoDials+st.PeerInfoDialsDropped >= int64((s+1)*entries)
		})
		eventually(t, 30*time.Second, "this session's peer-info dials ended", w.idle)
	}
	st := victim.m.Stats()
	t.Logf("victim opened %d TCP connections to the rogue's ports; stats %+v", accepted.Load(), st)
	if n := accepted.Load(); n > 4*8*2 {
		t.Errorf("victim opened %d connections to ports the rogue chose, want at most %d", n, 4*8*2)
	}
	if st.PeerInfoDials > 4 {
		t.Errorf("victim dialled %d peers that never handshook here on one advertiser's word, want at most 4", st.PeerInfoDials)
	}
	if st.PeerInfoDialsLimited["advertiser-strangers"] == 0 {
		t.Errorf("the per-advertiser bound was not counted: %v", st.PeerInfoDialsLimited)
	}
	victim.storesAll(t, halt())
}

// dialWatch sees a mesh's advertised-peer dials (peer-info and mDNS) as
// they start and end: how many run at once, the most addresses one
// tried, and how often each peer was dialled.
type dialWatch struct {
	mu                              sync.Mutex
	inFlight, maxInFlight, maxAddrs int
	dialled                         map[peer.ID]int
}

func newDialWatch() *dialWatch { return &dialWatch{dialled: map[peer.ID]int{}} }

// install is a newMember config tune that hooks w into the mesh.
func (w *dialWatch) install(c *mesh.Config) {
	mesh.SetPeerInfoDialHook(c, func(ai peer.AddrInfo) func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.inFlight++
		w.maxInFlight = max(w.maxInFlight, w.inFlight)
		w.maxAddrs = max(w.maxAddrs, len(ai.Addrs))
		w.dialled[ai.ID]++
		return func() {
			w.mu.Lock()
			w.inFlight--
			w.mu.Unlock()
		}
	})
}

// idle reports whether no dial is running.
func (w *dialWatch) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight == 0
}

// countingPorts listens on n loopback ports and counts the TCP connections
// they accept (each closed at once).
func countingPorts(t *testing.T, n int) ([]int, *atomic.Int64) {
	t.Helper()
	accepted := new(atomic.Int64)
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
	}
	return ports, accepted
}

// A host on the LAN answers mDNS for thousands of identities, each at a
// port it chose. mDNS answers are dialled on peer-info's terms, as one
// advertiser: the victim dials at most peerInfoStrangers of them a window
// (one address each, two tries), and honest traffic flows.
func TestMDNSFloodDialsBounded(t *testing.T) {
	w := newDialWatch()
	victim := newMember(t, "alpha", "victim", nil, w.install)
	honest := newMember(t, "alpha", "honest", []*member{victim}, nil)
	waitPeers(t, 1, victim, honest)
	halt := honestTraffic(t, honest)

	ports, accepted := countingPorts(t, 4)
	const answers = 2000
	for i := range answers {
		id := randomPeerID(t)
		a, err := multiaddr.NewMultiaddr(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i%len(ports)]))
		if err != nil {
			t.Fatal(err)
		}
		mesh.MDNSFound(victim.m, peer.AddrInfo{ID: id, Addrs: []multiaddr.Multiaddr{a}})
	}
	eventually(t, 30*time.Second, "victim acted on every answer", func() bool {
		st := victim.m.Stats()
		return st.PeerInfoDials+st.PeerInfoDialsDropped >= answers || accepted.Load() > 4*2
	})
	eventually(t, 30*time.Second, "the dials that went ahead ended", w.idle)
	st := victim.m.Stats()
	t.Logf("victim opened %d TCP connections for %d mDNS answers; stats %+v", accepted.Load(), answers, st)
	if n := accepted.Load(); n > 4*2 {
		t.Errorf("victim opened %d connections on mDNS answers, want at most %d", n, 4*2)
	}
	if st.PeerInfoDialsLimited["advertiser-strangers"] == 0 {
		t.Errorf("the per-advertiser bound was not counted: %v", st.PeerInfoDialsLimited)
	}
	victim.storesAll(t, halt())
}

// reopen opens a new /mmp stream on the rogue's connection (a new session).
func (r *rogue) reopen() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if r.s, err = r.h.NewStream(ctx, r.s.Conn().RemotePeer(), mesh.ProtocolID); err != nil {
		r.t.Fatal(err)
	}
}

// answerPings answers the victim's pings on s so that session stays up.
func answerPings(s network.Stream) {
	go func() {
		for {
			p, err := cmb.ReadFrame(s, nil)
			if err != nil {
				return
			}
			if f, err := cmb.ParseFrame(p); err == nil && f.FrameType() == cmb.TypePing {
				pp, _ := cmb.MarshalFrame(&cmb.Pong{})
				_ = cmb.WriteFrame(s, pp)
			}
		}
	}()
}
