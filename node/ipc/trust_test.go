package ipc

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
)

// The socket's trust request pins a key for a nodeId; status and peers
// list conflicts (none here); a bad key or a missing member is bad_request.
func TestTrustRequest(t *testing.T) {
	ts := startServer(t, nil)
	r := dialRaw(t, ts.path)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	key := cmb.EncodeKey(pub)
	m := r.call(`{"type":"trust","id":1,"nodeId":"0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f","key":"` + key + `"}`)
	wantResult(t, m, "trust")
	if m["key"] != key || m["resolved"] != false {
		t.Fatalf("trust: %v", m)
	}
	for _, typ := range []string{"status", "peers"} {
		m = r.call(`{"type":"` + typ + `"}`)
		if c, ok := m["conflicts"].([]any); !ok || len(c) != 0 {
			t.Fatalf("%s conflicts: %v", typ, m["conflicts"])
		}
	}
	wantError(t, r.call(`{"type":"trust","nodeId":"0190f5c2-1a2b-7c3d-8e4f-5a6b7c8d9e0f","key":"nope"}`), CodeBadRequest)
	wantError(t, r.call(`{"type":"trust","key":"`+key+`"}`), CodeBadRequest)
	wantError(t, r.call(`{"type":"trust","nodeId":"`+ts.node.Identity().NodeID+`","key":"`+key+`"}`), CodeRejected)
}
