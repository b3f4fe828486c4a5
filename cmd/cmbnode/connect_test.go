package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freePort is a loopback TCP port free at the time of the call.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// TestConnectCommand: cmbnode connect admits a member at runtime, and
// says which step failed for a bad address, a dead one and a stranger.
func TestConnectCommand(t *testing.T) {
	dir := t.TempDir()
	createGroup(t, filepath.Join(dir, "a"), "alpha")
	a := startDaemon(t, filepath.Join(dir, "a"))
	line := invite(t, a.home)
	join(t, filepath.Join(dir, "b"), line)
	// The invite names a's address, which join made b's bootstrap; the
	// flag replaces it with a dead one, so only connect brings them together.
	b := startDaemon(t, filepath.Join(dir, "b"), "--bootstrap", "/ip4/127.0.0.1/tcp/1/p2p/"+status(t, dialDaemon(t, a)).PeerID)
	createGroup(t, filepath.Join(dir, "s"), "alpha")
	s := startDaemon(t, filepath.Join(dir, "s"))
	ca := dialDaemon(t, a)
	bAddr := status(t, dialDaemon(t, b)).Addrs[0]

	r := bin(t, "", "connect", "--home", a.home, bAddr)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "connected to ") || !strings.Contains(r.stdout, "direct") {
		t.Fatalf("connect to a member: %+v", r)
	}
	waitFor(t, "a lists b", 10*time.Second, func() bool { return status(t, ca).Peers == 1 })

	if r := bin(t, "", "connect", "--home", a.home, "/ip4/127.0.0.1/tcp/1"); r.code != 2 || !strings.Contains(r.stderr, "/p2p/") {
		t.Fatalf("connect without /p2p/: %+v", r)
	}
	dead := "/ip4/127.0.0.1/tcp/" + freePort(t) + "/p2p/" + status(t, dialDaemon(t, s)).PeerID
	if r := bin(t, "", "connect", "--home", a.home, dead); r.code != 1 || !strings.Contains(r.stderr, "could not reach the peer") {
		t.Fatalf("connect to a dead address: %+v", r)
	}
	sAddr := status(t, dialDaemon(t, s)).Addrs[0]
	if r := bin(t, "", "connect", "--home", a.home, sAddr); r.code != 1 || !strings.Contains(r.stderr, "not admitted") {
		t.Fatalf("connect to a stranger: %+v", r)
	}
	if st := status(t, ca); st.Peers != 1 {
		t.Fatalf("a has %d peers after the stranger, want 1", st.Peers)
	}
}

// TestSwarmPortRefused: a second daemon given the port the first listens
// on refuses to start, naming it, instead of sharing it through
// SO_REUSEPORT.
func TestSwarmPortRefused(t *testing.T) {
	dir := t.TempDir()
	listen := "/ip4/127.0.0.1/tcp/" + freePort(t)
	startDaemon(t, filepath.Join(dir, "one"), "--listen", listen)
	_, err := spawnDaemon(t, filepath.Join(dir, "two"), "--listen", listen)
	if err == nil || !strings.Contains(err.Error(), "the port is taken") || !strings.Contains(err.Error(), listen) {
		t.Fatalf("second daemon on %s: %v", listen, err)
	}
}
