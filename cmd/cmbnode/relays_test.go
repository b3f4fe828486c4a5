package main

import (
	"slices"
	"testing"
)

// TestRelaysOf: an invite's circuit addresses name the relays a joiner
// keeps; direct addresses name none, and a relay is listed once.
func TestRelaysOf(t *testing.T) {
	r := "/ip4/203.0.113.7/tcp/4747/p2p/12D3KooWRelay"
	got := relaysOf([]string{
		"/ip4/192.0.2.1/tcp/4747/p2p/12D3KooWPeer",
		r + "/p2p-circuit/p2p/12D3KooWPeer",
		r + "/p2p-circuit/p2p/12D3KooWPeer",
	})
	if !slices.Equal(got, []string{r}) {
		t.Fatalf("relaysOf: %v, want [%s]", got, r)
	}
	if got := relaysOf([]string{"/ip4/192.0.2.1/tcp/4747/p2p/12D3KooWPeer"}); len(got) != 0 {
		t.Fatalf("direct addresses name relays: %v", got)
	}
}
