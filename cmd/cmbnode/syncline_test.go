package main

import (
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
)

func TestSyncLine(t *testing.T) {
	for _, c := range []struct {
		p    node.SyncProgress
		want string
	}{
		{node.SyncProgress{Syncing: true, Received: 8798, Expected: 25000, Peers: 1, ETA: 6200 * time.Millisecond}, "8,798 of ~25,000 from 1 peer, ETA 6 s"},
		{node.SyncProgress{Syncing: true, Received: 0, Expected: 120, Peers: 2}, "0 of ~120 from 2 peers"},
		{node.SyncProgress{Syncing: true, Received: 10, Expected: 1_000_000, Peers: 3, ETA: 10 * time.Minute}, "10 of ~1,000,000 from 3 peers, ETA 10 min"},
	} {
		if got := syncLine(c.p); got != c.want {
			t.Errorf("syncLine(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}
