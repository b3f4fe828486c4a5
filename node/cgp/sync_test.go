package cgp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/node/cgp"
)

// syncingBackend is a MemBackend whose provider is still catching up.
type syncingBackend struct {
	*cgp.MemBackend
	syncing bool
}

func (b *syncingBackend) Syncing() (cgp.SyncNotice, bool) {
	return cgp.SyncNotice{Note: "still catching up", Received: 10, Expected: 100, Peers: 2}, b.syncing
}

// An answer given while the provider catches up says so in the vendor
// member cmbnode:sync, frames unchanged; otherwise the member is absent.
func TestQueryWhileSyncingSaysSo(t *testing.T) {
	b := &syncingBackend{MemBackend: smallStore(), syncing: true}
	e := mustEngine(t, b)
	const q = `{"goal":"retry policy","max_frames":8,"max_tokens":4096}`
	res := query(t, e, q)
	if res.Sync == nil || res.Sync.Received != 10 || res.Sync.Expected != 100 || res.Sync.Peers != 2 {
		t.Fatalf("sync notice %+v, want 10 of 100 from 2 peers", res.Sync)
	}
	js, _ := json.Marshal(res)
	if !strings.Contains(string(js), `"cmbnode:sync":{"note":"still catching up"`) {
		t.Errorf("the wire form carries no cmbnode:sync member: %s", js)
	}
	b.syncing = false
	after := query(t, e, q)
	js, _ = json.Marshal(after)
	if after.Sync != nil || strings.Contains(string(js), "cmbnode:sync") {
		t.Errorf("a notice when not syncing: %s", js)
	}
	if len(after.Frames) != len(res.Frames) {
		t.Errorf("%d frames while syncing, %d after: the notice changed the answer", len(res.Frames), len(after.Frames))
	}
}
