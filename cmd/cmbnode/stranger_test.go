package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
)

// captured is everything a stranger host received from a daemon: the
// frames on its /mmp stream and the messages on the group's topic.
type captured struct {
	frames [][]byte
	topic  [][]byte
}

// strangerDial is a rogue libp2p host that subscribes to the topic of
// tag, dials the daemon at addr, handshakes naming wire as its group and,
// given keys, proves membership at epoch with them. It captures what the
// daemon sends until the daemon closes the stream, and the topic's
// messages for a second after.
func strangerDial(t *testing.T, addr, tag, wire string, keys *groupkey.Keyring, epoch uint32) captured {
	t.Helper()
	id, err := identity.Create(t.TempDir(), "stranger", nil)
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
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign), pubsub.WithNoAuthor())
	if err != nil {
		t.Fatal(err)
	}
	top, err := ps.Join(group.Topic(tag))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := top.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(ctx, ai.ID, "/mmp/1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	write := func(p []byte) { _ = cmb.WriteFrame(s, p) } // the daemon may have closed already
	hs, _ := cmb.MarshalFrame(&cmb.Handshake{NodeID: id.NodeID, Name: "stranger", Version: cmb.ProtocolVersion,
		PublicKey: id.PublicKeyB64(), E2EPublicKey: id.E2EPublicKeyDER(), Group: wire, LifecycleRole: "participant"})
	write(hs)
	var out captured
	_ = s.SetReadDeadline(time.Now().Add(15 * time.Second))
	read := func() ([]byte, bool) {
		p, err := cmb.ReadFrame(s, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Logf("stranger reading: %v", err)
			}
			return nil, false
		}
		out.frames = append(out.frames, p)
		return p, true
	}
	if keys != nil {
		nonce, _ := groupkey.NewNonce()
		nf, _ := json.Marshal(map[string]any{"type": "x-cmbnode-group-nonce", "v": 1, "epoch": epoch, "nonce": nonce[:]})
		write(nf)
		var theirs struct{ Nonce []byte }
		for range 2 { // the daemon's handshake, then its nonce
			if p, ok := read(); ok {
				_ = json.Unmarshal(p, &theirs)
			}
		}
		mac, err := keys.Prove(epoch, []byte(h.ID()), []byte(ai.ID), nonce[:], theirs.Nonce)
		if err != nil {
			t.Fatal(err)
		}
		pf, _ := json.Marshal(map[string]any{"type": "x-cmbnode-group-proof", "v": 1, "epoch": epoch, "mac": mac})
		write(pf)
	}
	for {
		if _, ok := read(); !ok {
			break
		}
	}
	wait, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	for {
		msg, err := sub.Next(wait)
		if err != nil {
			return out
		}
		out.topic = append(out.topic, msg.GetData())
	}
}

// refusedOnly checks that c holds nothing but the daemon's handshake,
// nonce and one error frame with code want, no topic message, and none
// of plain.
func (c captured) refusedOnly(t *testing.T, who string, want int, plain ...string) {
	t.Helper()
	var codes []int
	for _, p := range c.frames {
		var f struct {
			Type string `json:"type"`
			Code int    `json:"code"`
		}
		_ = json.Unmarshal(p, &f)
		switch f.Type {
		case cmb.TypeHandshake, "x-cmbnode-group-nonce":
		case cmb.TypeError:
			codes = append(codes, f.Code)
		default:
			t.Errorf("%s received a %q frame: %s", who, f.Type, cmb.Truncate(string(p), 200))
		}
		for _, s := range plain {
			if bytes.Contains(p, []byte(s)) {
				t.Errorf("%s received %q in clear", who, s)
			}
		}
	}
	if len(codes) != 1 || codes[0] != want {
		t.Errorf("%s got error codes %v, want [%d]", who, codes, want)
	}
	if len(c.topic) != 0 {
		t.Errorf("%s received %d messages on the group's topic", who, len(c.topic))
	}
}
