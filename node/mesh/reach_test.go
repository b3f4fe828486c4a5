package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/mesh"
)

// strangerKeys are keys of a private group named grp that is not the
// test's: another id and secret, as a second `group create` makes.
func strangerKeys(t testing.TB, grp string) *groupkey.Keyring {
	t.Helper()
	g := testGroup(t, grp)
	g.ID[0] ^= 0xff
	g.Epochs[0].Secret[0] ^= 0xff
	k, err := groupkey.New(g, groupkey.Options{Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func relayService(c *mesh.Config) { c.RelayService = true }

func addrInfo(t testing.TB, mb *member) peer.AddrInfo {
	t.Helper()
	ai, err := peer.AddrInfoFromString(mb.m.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return *ai
}

// TestRelayServesMembersOnly: a member serving the relay grants a
// reservation to a member once its proof verified, and refuses one to a
// stranger who knows the group's name but not its secret, and to a plain
// libp2p host that never handshakes.
func TestRelayServesMembersOnly(t *testing.T) {
	r := newMember(t, "lab", "relay", nil, relayService)
	m := newMember(t, "lab", "member", nil, nil)
	s := newMemberIn(t, t.TempDir(), "lab", "stranger", strangerKeys(t, "lab"), nil)
	s.start(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := m.m.Host().Connect(ctx, addrInfo(t, r)); err != nil {
		t.Fatal(err)
	}
	// Asked at once: the relay waits for the member's proof to verify.
	if _, err := client.Reserve(ctx, m.m.Host(), addrInfo(t, r)); err != nil {
		t.Fatalf("member's reservation refused: %v", err)
	}
	if err := s.m.Host().Connect(ctx, addrInfo(t, r)); err != nil {
		t.Fatal(err)
	}
	_, err := client.Reserve(ctx, s.m.Host(), addrInfo(t, r))
	var re client.ReservationError
	if !errors.As(err, &re) {
		t.Fatalf("stranger's reservation: %v, want a refusal", err)
	}
	got := r.m.Reach()
	if !got.RelayService || got.RelayReservations != 1 || got.RelayRefused != 1 {
		t.Fatalf("relay counts %+v, want 1 granted and 1 refused", got)
	}
	if r.m.PeerCount() != 1 {
		t.Fatalf("relay admitted %d peers, want the member only", r.m.PeerCount())
	}
}

// TestConnect: Connect returns an admitted peer, and says which step
// failed: a bad address, a dial nobody answers, a stranger's proof.
func TestConnect(t *testing.T) {
	a := newMember(t, "lab", "a", nil, nil)
	b := newMember(t, "lab", "b", nil, nil)
	s := newMemberIn(t, t.TempDir(), "lab", "stranger", strangerKeys(t, "lab"), nil)
	s.start(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	pi, err := a.m.Connect(ctx, b.m.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if pi.NodeID != b.nodeID() || pi.Conn != mesh.ConnDirect {
		t.Fatalf("connected to %+v, want b, direct", pi)
	}
	if _, err := a.m.Connect(ctx, b.m.Addrs()[0]); err != nil {
		t.Fatalf("connecting to an admitted peer again: %v", err)
	}

	_, err = a.m.Connect(ctx, "/ip4/127.0.0.1/tcp/1")
	var ce *mesh.ConnectError
	if !errors.As(err, &ce) || ce.Stage != "address" || !errors.Is(err, node.ErrBadRequest) {
		t.Fatalf("no /p2p/: %v", err)
	}
	// A port nobody listens on (taken and released here): the dial fails.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "/ip4/127.0.0.1/tcp/" + strings.TrimPrefix(l.Addr().String(), "127.0.0.1:") + "/p2p/" + s.m.PeerID()
	l.Close()
	if _, err = a.m.Connect(ctx, dead); !errors.As(err, &ce) || ce.Stage != "dial" || !errors.Is(err, node.ErrUnavailable) {
		t.Fatalf("dead address: %v", err)
	}
	if _, err = a.m.Connect(ctx, s.m.Addrs()[0]); !errors.As(err, &ce) || ce.Stage != "admission" || !errors.Is(err, node.ErrRejected) {
		t.Fatalf("stranger: %v", err)
	}
	if a.m.PeerCount() != 1 {
		t.Fatalf("a has %d peers, want b only", a.m.PeerCount())
	}
}

// TestPeerstoreRedial: a member restarted with no bootstrap finds the
// peer it met before from the peerstore file in its home, which lists
// only admitted peers.
func TestPeerstoreRedial(t *testing.T) {
	home := t.TempDir()
	store := func(c *mesh.Config) { c.PeerstorePath = filepath.Join(home, mesh.PeerstoreFile) }
	b := newMember(t, "lab", "b", nil, nil)
	s := newMemberIn(t, t.TempDir(), "lab", "stranger", strangerKeys(t, "lab"), nil)
	s.start(nil)
	a := newMemberIn(t, home, "lab", "a", nil, store)
	a.keys = testKeys(t, "lab")
	a.start([]*member{b, s})
	waitPeers(t, 1, a)
	eventually(t, 20*time.Second, "a refuses the stranger", func() bool { st := a.m.Stats(); return st.ProofsFailed+st.GroupMismatches > 0 })
	a.stop()
	f, err := os.ReadFile(filepath.Join(home, mesh.PeerstoreFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f), b.m.PeerID()) || strings.Contains(string(f), s.m.PeerID()) {
		t.Fatalf("peerstore should list b and not the stranger:\n%s", f)
	}
	eventually(t, 20*time.Second, "b sees a leave", func() bool { return b.m.PeerCount() == 0 })

	a.start(nil) // no bootstrap
	waitPeers(t, 1, a)
	if st := a.m.Stats(); st.PeerstoreRedials != 1 {
		t.Fatalf("peerstore redials %d, want 1", st.PeerstoreRedials)
	}
}

// TestPeerstoreSavedWhileRunning: a member with no peer lets its save
// loop sleep; a peer admitted later wakes it, and the file lists the peer
// while the member runs, not only once it stops.
func TestPeerstoreSavedWhileRunning(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, mesh.PeerstoreFile)
	a := newMemberIn(t, home, "lab", "a", testKeys(t, "lab"), func(c *mesh.Config) { c.PeerstorePath = path })
	a.start(nil)
	// Past the loop's first look, which finds no session and sleeps.
	time.Sleep(6 * time.Second)
	b := newMember(t, "lab", "b", []*member{a}, nil)
	waitPeers(t, 1, a)
	eventually(t, 30*time.Second, "a's peerstore lists b", func() bool {
		f, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(f), b.m.PeerID())
	})
}

// TestPortTaken: a fixed port another socket holds is refused with a
// PortInUseError (libp2p's SO_REUSEPORT would share it silently), or
// with ListenFallback replaced by a random port.
func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := "/ip4/127.0.0.1/tcp/" + strings.TrimPrefix(l.Addr().String(), "127.0.0.1:")
	home := t.TempDir()
	id, err := identity.Create(home, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Options{Home: home, Group: "lab", Identity: id, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	keys := testKeys(t, "lab")
	_, err = mesh.Start(context.Background(), mesh.Config{Node: n, Keys: keys, Listen: []string{taken}, Logger: logger(t)})
	var pe *mesh.PortInUseError
	if !errors.As(err, &pe) || pe.Addr != taken {
		t.Fatalf("taken port: %v, want a PortInUseError", err)
	}
	m, err := mesh.Start(context.Background(), mesh.Config{Node: n, Keys: keys, Listen: []string{taken}, ListenFallback: true, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, a := range m.Addrs() {
		if strings.HasPrefix(a, taken+"/") {
			t.Fatalf("listening on the taken port: %v", m.Addrs())
		}
	}
	if len(m.Addrs()) == 0 {
		t.Fatal("no address after the fallback")
	}
}

// TestPeerstoreRedialTarget: a member restarted with no bootstrap and five
// members in its peerstore redials only PeerTarget (2) of them, not all
// it remembers. The others keep a PeerTarget of 1, so none dials it back
// on an announcement and the count is the redials' alone.
func TestPeerstoreRedialTarget(t *testing.T) {
	home := t.TempDir()
	one := func(c *mesh.Config) { c.PeerTarget = 1 }
	var others []*member
	for i := range 5 {
		others = append(others, newMember(t, "lab", fmt.Sprintf("o%d", i), nil, one))
	}
	a := newMemberIn(t, home, "lab", "a", nil, func(c *mesh.Config) {
		c.PeerstorePath = filepath.Join(home, mesh.PeerstoreFile)
		c.PeerTarget = 2
	})
	a.keys = testKeys(t, "lab")
	a.start(others) // bootstrap peers are dialled whatever the target
	waitPeers(t, 5, a)
	aid := a.m.PeerID()
	a.stop()
	for _, o := range others {
		eventually(t, 20*time.Second, "a has left", func() bool {
			return !slices.ContainsFunc(o.m.Peers(), func(p node.PeerInfo) bool { return p.PeerID == aid })
		})
	}

	a.start(nil)
	waitPeers(t, 2, a)
	time.Sleep(5 * time.Second) // the other redials had their chance
	if n, st := a.m.PeerCount(), a.m.Stats(); n != 2 || st.PeerstoreRedials != 2 {
		t.Fatalf("%d peers after %d peerstore redials, want 2 and 2", n, st.PeerstoreRedials)
	}
}
