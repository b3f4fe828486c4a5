package ipc

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/identity"
)

// A record whose author key came only with its gossiped frame shows
// "keyConfirmed": false in the get reply (what `cmbnode get --json`
// prints); once a handshake presents another key for that nodeId the
// record is held but not surfaced (get: not_found), and the status reply
// (what `cmbnode status` lists) names it under "quarantined".
func TestUnconfirmedKeyAndQuarantineOnTheSocket(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	real, err := identity.Create(t.TempDir(), "real", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// A member claims real's nodeId, signing with a key of its own that it
	// puts in the frame.
	rogueKey, roguePriv, _ := ed25519.GenerateKey(rand.Reader)
	var f cmb.Fields
	f[cmb.Focus].Text = "said in another's name"
	rec, err := cmb.Build(cmb.Draft{Fields: f, Group: ts.node.Group(), CreatedBy: real.NodeID, CreatedAt: time.Now().UnixMilli()}, roguePriv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ts.node.Check(ctx, rec, node.Source{PeerID: "peer-rogue", NodeID: "rogue", AuthorKey: cmb.EncodeKey(rogueKey), Via: "gossip"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.node.Accept(ctx, c); err != nil {
		t.Fatal(err)
	}
	var own cmb.Fields
	own[cmb.Focus].Text = "said in our own name"
	mine, err := ts.node.Remember(ctx, node.RememberInput{Fields: own})
	if err != nil {
		t.Fatal(err)
	}

	r := dialRaw(t, ts.path)
	m := r.call(`{"type":"get","key":"` + rec.Key + `"}`)
	wantResult(t, m, "get")
	if v, ok := m["keyConfirmed"]; !ok || v != false {
		t.Fatalf("get of a frame-keyed record: keyConfirmed %v (present %v), want false", v, ok)
	}
	m = r.call(`{"type":"get","key":"` + mine.Key + `"}`)
	if m["keyConfirmed"] != true {
		t.Fatalf("get of our own record: keyConfirmed %v, want true", m["keyConfirmed"])
	}
	// What `get --json` prints is the client's reply as decoded.
	g, err := dialClient(t, ts.path).Get(ctxT(t), rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := json.Marshal(g); !strings.Contains(string(out), `"keyConfirmed":false`) {
		t.Fatalf("get --json would print %s, without keyConfirmed false", out)
	}

	// The real owner handshakes: its key wins and the forgery is quarantined.
	if err := ts.node.PinPeer(ctx, real.NodeID, real.PublicKey(), real.X25519.PublicKey().Bytes(), "real"); err != nil {
		t.Fatal(err)
	}
	wantError(t, r.call(`{"type":"get","key":"`+rec.Key+`"}`), CodeNotFound)
	m = r.call(`{"type":"status"}`)
	q, _ := m["quarantined"].([]any)
	if !slices.Contains(q, any(rec.Key)) || len(q) != 1 {
		t.Fatalf("status quarantined %v, want [%s]", m["quarantined"], rec.Key)
	}
}
