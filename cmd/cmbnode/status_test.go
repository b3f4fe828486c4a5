package main

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A valid PeerID nobody runs (an Ed25519 key generated once and thrown away).
const nobodysPeerID = "12D3KooWFh9tujZikUMhhfVTUbDHVFKHDtR5xZi1mq6QHLv2eja4"

// TestStatusSaysWhyNoPeers: a daemon in group beta bootstrapped to a
// closed loopback port and to a daemon in group alpha has no peers, and
// `cmbnode status` says why on both sides: beta's bootstrap line with the
// dial's cause, and each side's refused line naming the other's group.
// The unreachable bootstrap is logged at WARN once.
func TestStatusSaysWhyNoPeers(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", l.Addr().(*net.TCPAddr).Port, nobodysPeerID)
	l.Close()
	a := startDaemon(t, filepath.Join(dir, "a"), "--group", "alpha", "--public")
	ca := dialDaemon(t, a)
	b := startDaemon(t, filepath.Join(dir, "b"), "--group", "beta", "--public", "--bootstrap", dead, "--bootstrap", status(t, ca).Addrs[0])
	cb := dialDaemon(t, b)
	waitFor(t, "each side refuses the other", 30*time.Second, func() bool {
		return len(status(t, ca).Refused) == 1 && len(status(t, cb).Refused) == 1
	})
	waitFor(t, "beta's dial to the closed port has failed", 30*time.Second, func() bool {
		for _, bp := range status(t, cb).Bootstrap {
			if bp.LastError == "connection refused" {
				return true
			}
		}
		return false
	})
	line := func(home, label string) string {
		t.Helper()
		r := bin(t, "", "status", "--home", home)
		if r.code != 0 {
			t.Fatalf("status: %+v", r)
		}
		m := regexp.MustCompile(`(?m)^` + label + ` +(.*)$`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("status has no %s line:\n%s", label, r.stdout)
		}
		return m[1]
	}
	t.Logf("beta status:\n%s", bin(t, "", "status", "--home", b.home).stdout)
	if got, want := line(b.home, "bootstrap"), "2 configured, 0 connected (last error: connection refused)"; got != want {
		t.Errorf("beta's bootstrap line %q, want %q", got, want)
	}
	if got, want := line(b.home, "refused"), `1 peer: group "alpha"`; got != want {
		t.Errorf("beta's refused line %q, want %q", got, want)
	}
	if got, want := line(a.home, "refused"), `1 peer: group "beta"`; got != want {
		t.Errorf("alpha's refused line %q, want %q", got, want)
	}
	if got, want := line(a.home, "bootstrap"), "0 configured, 0 connected"; got != want {
		t.Errorf("alpha's bootstrap line %q, want %q", got, want)
	}
	if n := strings.Count(b.logs.String(), "cannot reach a bootstrap peer"); n != 1 {
		t.Errorf("%d WARN lines for the unreachable bootstrap, want 1:\n%s", n, b.logs)
	}
}
