package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// The NAT lab: a small internet on one machine, in network namespaces the
// test creates and removes.
//
//	netns inet: bridge br0, the "internet", 11.0.0.0/24 (public-looking
//	│           address space, so go-libp2p arms hole punching; it exists
//	│           only inside these namespaces)
//	├─ relay    11.0.0.1               a public member serving the relay
//	├─ ra       11.0.0.2 | 10.1.0.1    router A: MASQUERADE, drops unsolicited
//	│   └─ a    10.1.0.2               member A
//	└─ rb       11.0.0.3 | 10.2.0.1    router B: the same
//	    └─ b    10.2.0.2               member B
//
// Every namespace is named labPrefix + a per-run id + "-" + its role, so a
// run removes what an earlier, killed run left (labSweep) and never what a
// concurrent run still uses (its pid is in the name). Veths are created
// inside the namespaces and iptables rules live in them, so deleting the
// namespaces removes everything; no address of the lab is routed from the
// root namespace, so no test packet leaves loopback or the lab.

// labPrefix starts the name of every namespace a lab creates.
const labPrefix = "cmblab"

// labRoles are the namespaces of one lab.
var labRoles = []string{"inet", "relay", "ra", "a", "rb", "b"}

type lab struct {
	t  testing.TB
	id string // per run: the pid in hex and a random suffix
}

// needLab skips unless the test can build the lab: root (namespaces,
// iptables) and the iptables tool (.ci/run installs Debian's package).
func needLab(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("the NAT lab needs root: it creates network namespaces, veths and iptables rules (CI runs as root)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("the NAT lab needs %s (Debian: apt-get install iptables iproute2; .ci/run does): %v", tool, err)
		}
	}
	if testing.Short() {
		tb.Skip("the NAT lab takes a few minutes; skipped with -short")
	}
}

// newLab builds the lab; symmetric makes both routers symmetric NATs
// (MASQUERADE --random-fully), where hole punching fails. Cleanup removes
// every namespace, also when the test fails.
func newLab(tb testing.TB, symmetric bool) *lab {
	tb.Helper()
	labSweep(tb)
	var r [2]byte
	_, _ = rand.Read(r[:])
	l := &lab{t: tb, id: strconv.FormatInt(int64(os.Getpid()), 16) + hex.EncodeToString(r[:])}
	tb.Cleanup(l.teardown) // registered first, so it runs after the daemons are killed
	for _, role := range labRoles {
		l.sh("ip", "netns", "add", l.ns(role))
		l.in(role, "ip", "link", "set", "lo", "up")
	}
	l.in("inet", "ip", "link", "add", "br0", "type", "bridge")
	l.in("inet", "ip", "link", "set", "br0", "up")
	// wire joins ifA in namespace a to ifB in namespace b.
	wire := func(a, ifA, b, ifB string) {
		l.sh("ip", "link", "add", ifA, "netns", l.ns(a), "type", "veth", "peer", "name", ifB, "netns", l.ns(b))
		l.in(a, "ip", "link", "set", ifA, "up")
		l.in(b, "ip", "link", "set", ifB, "up")
	}
	wire("relay", "eth0", "inet", "p-relay")
	l.in("inet", "ip", "link", "set", "p-relay", "master", "br0")
	l.in("relay", "ip", "addr", "add", "11.0.0.1/24", "dev", "eth0")
	for i, side := range []string{"a", "b"} {
		router, wan, lan := "r"+side, fmt.Sprintf("11.0.0.%d", i+2), fmt.Sprintf("10.%d.0", i+1)
		wire(router, "wan", "inet", "p-"+router)
		l.in("inet", "ip", "link", "set", "p-"+router, "master", "br0")
		l.in(router, "ip", "addr", "add", wan+"/24", "dev", "wan")
		wire(router, "lan", side, "eth0")
		l.in(router, "ip", "addr", "add", lan+".1/24", "dev", "lan")
		l.in(side, "ip", "addr", "add", lan+".2/24", "dev", "eth0")
		l.in(side, "ip", "route", "add", "default", "via", lan+".1")
		l.in(router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		// Silent drops: an RST or ICMP error for an unsolicited packet
		// would break the simultaneous open hole punching relies on.
		for _, rule := range [][]string{
			{"-P", "FORWARD", "DROP"},
			{"-A", "FORWARD", "-i", "lan", "-o", "wan", "-j", "ACCEPT"},
			{"-A", "FORWARD", "-i", "wan", "-o", "lan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
			{"-A", "INPUT", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
			{"-A", "INPUT", "-i", "wan", "-j", "DROP"},
		} {
			l.in(router, append([]string{"iptables"}, rule...)...)
		}
		l.setNAT(router, symmetric)
	}
	return l
}

// setNAT (re)writes a router's NAT rule: port-preserving MASQUERADE, or
// with random ports (a symmetric NAT). Existing connections keep their
// mappings; conntrack's table is flushed when the tool is there, so new
// ones get the new behaviour at once.
func (l *lab) setNAT(router string, symmetric bool) {
	lan := "10.1.0.0/24"
	if router == "rb" {
		lan = "10.2.0.0/24"
	}
	l.in(router, "iptables", "-t", "nat", "-F", "POSTROUTING")
	rule := []string{"iptables", "-t", "nat", "-A", "POSTROUTING", "-s", lan, "-o", "wan", "-j", "MASQUERADE"}
	if symmetric {
		rule = append(rule, "--random-fully")
	}
	l.in(router, rule...)
	if _, err := exec.LookPath("conntrack"); err == nil {
		_ = exec.Command("ip", "netns", "exec", l.ns(router), "conntrack", "-F").Run()
	}
}

func (l *lab) ns(role string) string { return labPrefix + l.id + "-" + role }

// in runs a command inside role's namespace; a failure ends the test.
func (l *lab) in(role string, args ...string) {
	l.t.Helper()
	l.sh(append([]string{"ip", "netns", "exec", l.ns(role)}, args...)...)
}

func (l *lab) sh(args ...string) {
	l.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (l *lab) teardown() {
	for _, role := range labRoles {
		if out, err := exec.Command("ip", "netns", "del", l.ns(role)).CombinedOutput(); err != nil {
			l.t.Logf("remove namespace %s: %v %s", l.ns(role), err, out)
		}
	}
}

// labSweep removes namespaces an earlier run left behind: those with the
// lab prefix whose run's process (the pid in the name) is gone.
func labSweep(tb testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, labPrefix) {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(name, labPrefix), "-")
		if len(id) < 5 {
			continue
		}
		pid, err := strconv.ParseInt(id[:len(id)-4], 16, 64)
		if err == nil && syscall.Kill(int(pid), 0) == nil {
			continue // a live run's
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			tb.Logf("remove leftover namespace %s: %v %s", name, err, out)
		} else {
			tb.Logf("removed leftover namespace %s", name)
		}
	}
}

// labDaemon runs the daemon binary inside role's namespace.
func (l *lab) daemon(role, home string, args ...string) *daemonProc {
	l.t.Helper()
	all := append([]string{"netns", "exec", l.ns(role), binary(l.t), "daemon", "--home", home, "--no-mdns"}, args...)
	cmd := exec.Command("ip", all...)
	cmd.Env = append(os.Environ(), "CMBNODE_HOME=")
	if v := os.Getenv("CMBNODE_LAB_GOLOG"); v != "" {
		cmd.Env = append(cmd.Env, "GOLOG_LOG_LEVEL="+v) // libp2p's own logs, to debug the lab
	}
	d, err := spawnCmd(l.t, home, cmd)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() {
		if l.t.Failed() {
			lines := strings.Split(d.logs.String(), "\n")
			l.t.Logf("%s (%s) logs, last lines:\n%s", role, home, strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
	})
	return d
}

// listenOn are a member's listen flags for one transport ("tcp",
// "quic") or both ("").
func listenOn(ip string, port int, transport string) []string {
	var out []string
	if transport != "quic" {
		out = append(out, "--listen", fmt.Sprintf("/ip4/%s/tcp/%d", ip, port))
	}
	if transport != "tcp" {
		out = append(out, "--listen", fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", ip, port))
	}
	return out
}

// labGroup makes the homes: relay creates private group "lab", a and b
// join with its invite (made while no daemon runs, so it names no
// address: members find each other only through what the test gives
// them), and stranger has a group "lab" of its own (another secret).
func labGroup(t testing.TB, dir string) (relay, a, b, stranger string) {
	relay, a, b, stranger = filepath.Join(dir, "relay"), filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "stranger")
	if r := bin(t, "", "group", "create", "lab", "--home", relay); r.code != 0 {
		t.Fatalf("group create: %+v", r)
	}
	r := bin(t, "", "invite", "--home", relay)
	if r.code != 0 {
		t.Fatalf("invite: %+v", r)
	}
	for _, h := range []string{a, b} {
		if j := bin(t, "", "join", "--home", h, strings.TrimSpace(r.stdout)); j.code != 0 {
			t.Fatalf("join: %+v", j)
		}
	}
	if r := bin(t, "", "group", "create", "lab", "--home", stranger); r.code != 0 {
		t.Fatalf("group create: %+v", r)
	}
	return relay, a, b, stranger
}

// relayAddr is the relay daemon's address for transport.
func relayAddr(t testing.TB, c *ipc.Client, transport string) string {
	t.Helper()
	want := "/ip4/11.0.0.1/tcp/"
	if transport == "quic" {
		want = "/ip4/11.0.0.1/udp/"
	}
	for _, a := range status(t, c).Addrs {
		if strings.HasPrefix(a, want) && (transport == "quic") == strings.Contains(a, "quic") {
			return a
		}
	}
	t.Fatalf("relay has no %s address: %v", transport, status(t, c).Addrs)
	return ""
}

// peerConn is how c's daemon is connected to peerID ("" when not a peer).
func peerConn(t testing.TB, c *ipc.Client, peerID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := c.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.PeerID == peerID {
			return p.Conn
		}
	}
	return ""
}

func reach(t testing.TB, c *ipc.Client) node.Reach {
	t.Helper()
	st := status(t, c)
	if st.Reach == nil {
		t.Fatal("status has no reach")
	}
	return *st.Reach
}

// remember authors n CMBs on c and returns their keys.
func rememberN(t testing.TB, c *ipc.Client, n int, what string) []string {
	t.Helper()
	var keys []string
	for i := range n {
		r, err := c.Remember(context.Background(), ipc.RememberArgs{Fields: map[string]any{"focus": fmt.Sprintf("%s %d", what, i)}})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, r.Key)
	}
	return keys
}

func hasAll(t testing.TB, c *ipc.Client, keys []string) bool {
	for _, k := range keys {
		if !has(t, c, k) {
			return false
		}
	}
	return true
}

// labRun is one lab with its relay and two members, A and B, each behind
// its router, all started.
type labRun struct {
	l                                 *lab
	relayHome, aHome, bHome, stranger string
	relay, a, b                       *daemonProc
	cr, ca, cb                        *ipc.Client
	relayID, aID, bID, rTCP           string
	relayArgs                         []string
}

// startLab builds a lab and starts the relay (public, relay service) and
// A and B (reachability private, the relay as their static relay, no
// bootstrap, no mDNS), each on port 4747 of its own namespace.
func startLab(t testing.TB, symmetric bool) *labRun {
	needLab(t)
	r := &labRun{l: newLab(t, symmetric)}
	r.relayHome, r.aHome, r.bHome, r.stranger = labGroup(t, t.TempDir())
	r.relayArgs = append(listenOn("11.0.0.1", 4747, ""), "--relay-service", "--reachability", "public")
	r.relay = r.l.daemon("relay", r.relayHome, r.relayArgs...)
	r.cr = dialDaemon(t, r.relay)
	r.relayID = status(t, r.cr).PeerID
	r.rTCP = relayAddr(t, r.cr, "tcp")
	r.a, r.ca = r.member(t, "a", r.aHome, "--relay", r.rTCP)
	r.aID = status(t, r.ca).PeerID
	r.b, r.cb = r.member(t, "b", r.bHome, "--relay", r.rTCP)
	r.bID = status(t, r.cb).PeerID
	return r
}

func (r *labRun) member(t testing.TB, role, home string, extra ...string) (*daemonProc, *ipc.Client) {
	args := append(listenOn("0.0.0.0", 4747, ""), "--reachability", "private")
	d := r.l.daemon(role, home, append(args, extra...)...)
	return d, dialDaemon(t, d)
}

// TestLabSymmetricNAT: behind symmetric NATs (MASQUERADE --random-fully)
// A and B meet through the relay and exchange CMBs both ways; hole
// punching is tried and fails, they stay relayed, and every CMB arrives.
// A stranger (group "lab", another secret) then asks the relay for a
// reservation and is refused.
func TestLabSymmetricNAT(t *testing.T) {
	r := startLab(t, true)
	took := waitFor(t, "A and B meet through the relay", 90*time.Second, func() bool {
		return peerConn(t, r.ca, r.bID) != "" && peerConn(t, r.cb, r.aID) != ""
	})
	t.Logf("A and B admitted each other %v after B started", took)
	if got := reach(t, r.ca).Relays; len(got) != 1 || got[0] != r.relayID {
		t.Errorf("A's relays: %v, want the relay %s", got, r.relayID)
	}
	fromA := rememberN(t, r.ca, 20, "from A, relayed")
	fromB := rememberN(t, r.cb, 20, "from B, relayed")
	took = waitFor(t, "every CMB crosses the relay", 60*time.Second, func() bool {
		return hasAll(t, r.cb, fromA) && hasAll(t, r.ca, fromB)
	})
	t.Logf("40 CMBs crossed the relay in %v", took)
	waitFor(t, "a hole punch is tried and fails", 60*time.Second, func() bool {
		return reach(t, r.ca).HolePunchFailures+reach(t, r.cb).HolePunchFailures > 0
	})
	// Still relayed, and what is sent now still arrives.
	late := rememberN(t, r.ca, 5, "from A, after the failed hole punch")
	waitFor(t, "CMBs still cross the relay", 60*time.Second, func() bool { return hasAll(t, r.cb, late) })
	for name, c := range map[string]*ipc.Client{"A": r.ca, "B": r.cb} {
		other := r.bID
		if name == "B" {
			other = r.aID
		}
		if got := peerConn(t, c, other); got != "relayed" {
			t.Fatalf("%s's connection to the other member is %q, want relayed", name, got)
		}
		if rc := reach(t, c); rc.HolePunchSuccesses != 0 {
			t.Fatalf("%s reports %d hole-punch successes behind symmetric NATs", name, rc.HolePunchSuccesses)
		}
	}

	// A stranger behind router A gets no reservation.
	before := reach(t, r.cr).RelayRefused
	s := r.l.daemon("a", r.stranger, append(listenOn("0.0.0.0", 4748, "tcp"), "--reachability", "private", "--relay", r.rTCP)...)
	cs := dialDaemon(t, s)
	waitFor(t, "the relay refuses the stranger's reservation", 90*time.Second, func() bool { return reach(t, r.cr).RelayRefused > before })
	if rc := reach(t, cs); len(rc.Relays) != 0 {
		t.Fatalf("the stranger holds a reservation on %v", rc.Relays)
	}
	if st := status(t, cs); st.Peers != 0 || st.CMBs != 0 {
		t.Fatalf("the stranger has %d peers and %d CMBs", st.Peers, st.CMBs)
	}
	if rr := reach(t, r.cr); rr.RelayReservations < 2 {
		t.Fatalf("the relay granted %d reservations, want A's and B's: %+v", rr.RelayReservations, rr)
	}
}

// TestLabNAT: behind port-preserving NATs, in order:
//
//  1. A and B meet through the relay and hole punching gives them a
//     direct connection; the relayed one is closed, and CMBs then arrive
//     by gossip on the direct connection;
//  2. the relay stops: direct gossip goes on;
//  3. the relay is back; A restarts with no bootstrap and no relay given,
//     and finds the relay and B again from its peerstore.
func TestLabNAT(t *testing.T) {
	r := startLab(t, false)
	took := waitFor(t, "hole punching moves A and B to a direct connection", 90*time.Second, func() bool {
		return peerConn(t, r.ca, r.bID) == "direct" && peerConn(t, r.cb, r.aID) == "direct"
	})
	t.Logf("A and B direct %v after B started", took)
	if n := reach(t, r.ca).HolePunchSuccesses + reach(t, r.cb).HolePunchSuccesses; n == 0 {
		t.Fatal("direct, but no hole punch succeeded: the NATs let a plain dial through")
	}
	if u := reach(t, r.ca).Upgrades + reach(t, r.cb).Upgrades; u == 0 {
		t.Fatal("no side closed the relayed connection after the hole punch")
	}
	// Gossip, not catch-up or fetch, delivers them: B's counters of those
	// stay where they were.
	cBefore := status(t, r.cb).Counters
	direct := rememberN(t, r.ca, 5, "from A, direct")
	took = waitFor(t, "CMBs reach B on the direct connection", 30*time.Second, func() bool { return hasAll(t, r.cb, direct) })
	t.Logf("5 CMBs reached B directly in %v", took)
	if c := status(t, r.cb).Counters; c.CaughtUp != cBefore.CaughtUp || c.Fetched != cBefore.Fetched {
		t.Fatalf("B got the direct CMBs by catch-up or fetch, not gossip: %+v then %+v", cBefore, c)
	}
	if got := peerConn(t, r.cb, r.aID); got != "direct" {
		t.Fatalf("after the delivery B's connection to A is %q, want direct only", got)
	}

	// 2. The relay goes down; direct traffic continues.
	if err := r.relay.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("relay did not stop cleanly: %v", err)
	}
	waitFor(t, "A sees the relay leave", 30*time.Second, func() bool { return peerConn(t, r.ca, r.relayID) == "" })
	after := rememberN(t, r.cb, 5, "from B, relay down")
	// The bound covers one catch-up round (60 s): once in nine runs gossip
	// alone had not delivered within 30 s; what must hold is that nothing
	// is lost and the connection stays direct.
	took = waitFor(t, "CMBs reach A with the relay down", 90*time.Second, func() bool { return hasAll(t, r.ca, after) })
	t.Logf("5 CMBs reached A with the relay down in %v", took)
	if got := peerConn(t, r.ca, r.bID); got != "direct" {
		t.Fatalf("with the relay down A's connection to B is %q", got)
	}

	// 3. The relay is back; A restarts knowing no one but its peerstore.
	r.relay = r.l.daemon("relay", r.relayHome, r.relayArgs...)
	r.cr = dialDaemon(t, r.relay)
	if err := r.a.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("A did not stop cleanly: %v", err)
	}
	known, err := os.ReadFile(filepath.Join(r.aHome, "peers.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{r.relayID, r.bID} {
		if !bytes.Contains(known, []byte(id)) {
			t.Fatalf("A's peerstore lacks %s:\n%s", id, known)
		}
	}
	waitFor(t, "B sees A leave", 30*time.Second, func() bool { return peerConn(t, r.cb, r.aID) == "" })
	r.a, r.ca = r.member(t, "a", r.aHome) // no --relay, no --bootstrap, no mDNS
	took = waitFor(t, "A finds the relay and B again", 120*time.Second, func() bool {
		return peerConn(t, r.ca, r.relayID) != "" && peerConn(t, r.ca, r.bID) != ""
	})
	t.Logf("A restarted and met the relay and B again from its peerstore in %v", took)
	again := rememberN(t, r.cb, 3, "from B, after A's restart")
	waitFor(t, "CMBs reach the restarted A", 30*time.Second, func() bool { return hasAll(t, r.ca, again) })
}
