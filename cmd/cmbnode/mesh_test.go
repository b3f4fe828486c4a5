package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// meshDaemon starts a daemon on loopback with mDNS off.
func meshDaemon(t *testing.T, home, grp string, bootstrap ...string) *daemonProc {
	t.Helper()
	args := []string{"--no-mdns", "--group", grp, "--listen", "/ip4/127.0.0.1/tcp/0"}
	for _, b := range bootstrap {
		args = append(args, "--bootstrap", b)
	}
	return startDaemon(t, home, args...)
}

func dialDaemon(t testing.TB, d *daemonProc) *ipc.Client { return dialSock(t, d.sock) }

// dialSock connects a test client to a daemon socket; it is closed when the
// test ends, or earlier by the caller.
func dialSock(t testing.TB, sock string) *ipc.Client {
	t.Helper()
	c, err := ipc.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func status(t testing.TB, c *ipc.Client) ipc.StatusReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitFor polls cond until it holds or the deadline passes; it returns how
// long it took. The deadline only bounds a broken run: the time is logged.
func waitFor(t testing.TB, what string, deadline time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > deadline {
			t.Fatalf("%s: not within %v", what, deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func has(t testing.TB, c *ipc.Client, key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Call(ctx, ipc.TypeGet, map[string]any{"key": key})
	return err == nil
}

// invite prints an invite to the private group of the daemon in home.
func invite(t *testing.T, home string, args ...string) string {
	t.Helper()
	r := bin(t, "", append([]string{"invite", "--home", home}, args...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "cmbnode-invite-1.") {
		t.Fatalf("invite: %+v", r)
	}
	return strings.TrimSpace(r.stdout)
}

// createGroup runs cmbnode group create on a fresh home.
func createGroup(t *testing.T, home, name string) {
	t.Helper()
	if r := bin(t, "", "group", "create", name, "--home", home); r.code != 0 || !strings.Contains(r.stdout, "created private group "+name) {
		t.Fatalf("group create: %+v", r)
	}
}

// join runs cmbnode join on home with line.
func join(t *testing.T, home, line string) {
	t.Helper()
	if r := bin(t, "", "join", "--home", home, line); r.code != 0 {
		t.Fatalf("join: %+v", r)
	}
}

// TestDaemonsMeshAndIsolateGroups: three daemons in private group alpha
// (the second and third joined with the first's invite), one in beta and
// one in an alpha of its own (the right name, no secret), all bootstrapped
// to the first, as separate processes. A CMB remembered on one alpha
// member reaches the other two; neither outsider holds or receives any.
func TestDaemonsMeshAndIsolateGroups(t *testing.T) {
	dir := t.TempDir()
	createGroup(t, filepath.Join(dir, "a1"), "alpha")
	a1 := meshDaemon(t, filepath.Join(dir, "a1"), "alpha")
	c1 := dialDaemon(t, a1)
	boot := status(t, c1).Addrs[0]
	line := invite(t, a1.home)
	var members []*daemonProc
	for _, n := range []string{"a2", "a3"} {
		h := filepath.Join(dir, n)
		join(t, h, line)
		members = append(members, startDaemon(t, h))
	}
	a2, a3 := members[0], members[1]
	b1 := meshDaemon(t, filepath.Join(dir, "b1"), "beta", boot, status(t, dialDaemon(t, a2)).Addrs[0])
	x1 := meshDaemon(t, filepath.Join(dir, "x1"), "alpha", boot) // alpha by name only
	c2, c3, cb, cx := dialDaemon(t, a2), dialDaemon(t, a3), dialDaemon(t, b1), dialDaemon(t, x1)

	waitFor(t, "alpha daemons see each other", 30*time.Second, func() bool {
		return status(t, c1).Peers == 2 && status(t, c2).Peers == 2 && status(t, c3).Peers == 2
	})
	ctx := context.Background()
	res, err := c1.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "alpha only: deploy window is 14:00"}})
	if err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "the CMB reaches both other alpha daemons", 10*time.Second, func() bool {
		return has(t, c2, res.Key) && has(t, c3, res.Key)
	})
	t.Logf("remember on a1 → stored on a2 and a3 in %v", took)

	// Give the outsiders every chance to (wrongly) receive it.
	time.Sleep(500 * time.Millisecond)
	for name, c := range map[string]*ipc.Client{"beta": cb, "alpha without the secret": cx} {
		st := status(t, c)
		if has(t, c, res.Key) || st.CMBs != 0 || st.Counters.Received != 0 || st.Peers != 0 {
			t.Fatalf("%s holds or received alpha traffic: cmbs %d received %d peers %d", name, st.CMBs, st.Counters.Received, st.Peers)
		}
	}
	if st := status(t, c2); st.Counters.Accepted < 1 {
		t.Fatalf("a2 counters: %+v", st.Counters)
	}
	// a1 counted the other alpha as refused for its group.
	if st := status(t, c1); !refusedAs(st, status(t, cx).PeerID, "group") {
		t.Errorf("a1 does not list the other alpha as refused: %+v", st.Refused)
	}
}

// TestPublicDaemons: two daemons in a public group, one by --public and
// one by public = true in its config (init --public), meet by name alone
// and deliver, as plain MMP nodes would; each warns that the group is open.
func TestPublicDaemons(t *testing.T) {
	dir := t.TempDir()
	p1 := startDaemon(t, filepath.Join(dir, "p1"), "--group", "open", "--public", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0")
	c1 := dialDaemon(t, p1)
	h2 := filepath.Join(dir, "p2")
	if r := bin(t, "", "init", "--home", h2, "--group", "open", "--public"); r.code != 0 {
		t.Fatal(r)
	}
	if b, err := os.ReadFile(filepath.Join(h2, "config.toml")); err != nil || !strings.Contains(string(b), "\npublic = true\n") {
		t.Fatalf("init --public wrote no public = true: %v\n%s", err, b)
	}
	p2 := startDaemon(t, h2, "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", status(t, c1).Addrs[0])
	c2 := dialDaemon(t, p2)
	waitFor(t, "public daemons meet", 30*time.Second, func() bool { return status(t, c2).Peers == 1 })
	res, err := c1.Remember(context.Background(), ipc.RememberArgs{Fields: map[string]any{"focus": "public note"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the public CMB reaches p2", 10*time.Second, func() bool { return has(t, c2, res.Key) })
	for _, d := range []*daemonProc{p1, p2} {
		if !strings.Contains(d.logs.String(), "anyone who knows its name") {
			t.Errorf("no WARN about the public group:\n%s", d.logs)
		}
		if _, err := os.Stat(filepath.Join(d.home, "groups")); !os.IsNotExist(err) {
			t.Errorf("a public daemon made a group secret: %v", err)
		}
	}
}

// TestInviteJoinCatchesUp: a fresh home joins with an invite (which names
// the inviter's address) and catches up what the group holds; garbled,
// expired and other-group invites are refused with one line each, and
// the secret appears in no log.
func TestInviteJoinCatchesUp(t *testing.T) {
	dir := t.TempDir()
	a1 := startDaemon(t, filepath.Join(dir, "a1")) // a fresh home: private group "default"
	c1 := dialDaemon(t, a1)
	ctx := context.Background()
	var keys []string
	for i := range 20 {
		r, err := c1.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": fmt.Sprintf("before the join %d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, r.Key)
	}
	line := invite(t, a1.home, "--expires", "1h")

	// Bad invites: one line naming what is wrong, nothing written.
	bad := filepath.Join(dir, "bad")
	garbled := line[:40] + string(rune(line[40]^1)) + line[41:]
	expired := invite(t, a1.home, "--expires", "1ns")
	for name, c := range map[string]struct{ inv, want string }{
		"garbled":   {garbled, "invite is garbled"},
		"truncated": {line[:len(line)-10], "invite is garbled"},
		"expired":   {expired, "invite is expired"},
	} {
		r := bin(t, "", "join", "--home", bad, c.inv)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s invite: %+v, want exit 1 and one line with %q", name, r, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(bad, "groups")); !os.IsNotExist(err) {
		t.Errorf("a refused invite wrote secrets: %v", err)
	}
	other := filepath.Join(dir, "other")
	if r := bin(t, "", "init", "--home", other, "--group", "beta"); r.code != 0 {
		t.Fatal(r)
	}
	if r := bin(t, "", "join", "--home", other, line); r.code != 1 || !strings.Contains(r.stderr, "invite is for another group") {
		t.Errorf("invite for another group: %+v", r)
	}
	// A home with a private group "default" of its own: same name, another group.
	same := filepath.Join(dir, "same")
	createGroup(t, same, "default")
	own, err := os.ReadFile(filepath.Join(same, "groups", "default", "1.key"))
	if err != nil {
		t.Fatal(err)
	}
	r := bin(t, "", "join", "--home", same, line)
	if r.code != 1 || !strings.Contains(r.stderr, "another private group of that name") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("invite for another private group of the same name: %+v, want exit 1 and one line", r)
	}
	if now, err := os.ReadFile(filepath.Join(same, "groups", "default", "1.key")); err != nil || !bytes.Equal(now, own) {
		t.Errorf("a refused invite changed the home's own secret: %v", err)
	}

	h2 := filepath.Join(dir, "a2")
	join(t, h2, line)
	a2 := startDaemon(t, h2)
	c2 := dialDaemon(t, a2)
	waitFor(t, "the joined daemon holds all 20", 30*time.Second, func() bool { return status(t, c2).CMBs == 20 })
	for _, k := range keys {
		if !has(t, c2, k) {
			t.Fatalf("a2 lacks %s", k)
		}
	}
	// The secret is in the invite and the 0600 file only.
	g, err := os.ReadFile(filepath.Join(h2, "groups", "default", "1.key"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Secret string }
	if err := json.Unmarshal(g, &f); err != nil || f.Secret == "" {
		t.Fatalf("secret file: %v", err)
	}
	for _, d := range []*daemonProc{a1, a2} {
		if strings.Contains(d.logs.String(), f.Secret) {
			t.Error("a daemon logged the group secret")
		}
	}
	if r := bin(t, "", "status", "--json", "--home", h2); strings.Contains(r.stdout, f.Secret) {
		t.Error("status shows the group secret")
	}
}

// setGrace sets rotation_grace in home's config.toml.
func setGrace(t *testing.T, home, grace string) {
	t.Helper()
	p := filepath.Join(home, "config.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^rotation_grace = .*$`)
	if !re.Match(b) {
		t.Fatalf("config.toml has no rotation_grace:\n%s", b)
	}
	if err := os.WriteFile(p, re.ReplaceAll(b, []byte(`rotation_grace = "`+grace+`"`)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// refusedAs reports whether st lists peerID as refused for one of reasons.
func refusedAs(st ipc.StatusReply, peerID string, reasons ...string) bool {
	for _, r := range st.Refused {
		if r.PeerID == peerID && slices.Contains(reasons, r.Reason) {
			return true
		}
	}
	return false
}

// TestDaemonsRefuseStrangerAndOldSecret, as separate processes: a1
// creates private group alpha, a2 and a3 join with its invite, all with
// a 15 s rotation grace (a2 must load the new secret within it: the
// daemon reloads keys as their files change). A stranger that knows the name but no secret
// (a --public alpha daemon) dials a1 and is refused, counted and logged
// with its address, and holds nothing. a1 rotates (group rotate prints a
// new invite; group show lists both epochs, never a secret); a2 joins the
// new epoch and stays; a3, with only the old secret, is cut off after the
// grace — refused, counted, logged with its address — and receives none
// of what a1 remembers after, while a2 does. Rogue libp2p hosts, one with
// the name only and one proving with a3's old secret, capture what a1
// sends them: its handshake, its nonce, an error; no record, no plaintext,
// nothing on the topic.
func TestDaemonsRefuseStrangerAndOldSecret(t *testing.T) {
	dir := t.TempDir()
	h1 := filepath.Join(dir, "a1")
	createGroup(t, h1, "alpha")
	setGrace(t, h1, "15s")
	a1 := meshDaemon(t, h1, "alpha")
	c1 := dialDaemon(t, a1)
	line := invite(t, h1)
	var ds []*daemonProc
	for _, n := range []string{"a2", "a3"} {
		h := filepath.Join(dir, n)
		join(t, h, line)
		setGrace(t, h, "15s")
		ds = append(ds, startDaemon(t, h))
	}
	a2 := ds[0]
	c2, c3 := dialDaemon(t, a2), dialDaemon(t, ds[1])
	waitFor(t, "the three members meet", 30*time.Second, func() bool {
		return status(t, c1).Peers == 2 && status(t, c2).Peers == 2 && status(t, c3).Peers == 2
	})
	ctx := context.Background()
	first, err := c1.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "alpha before the rotation"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a3 stores the first record", 10*time.Second, func() bool { return has(t, c3, first.Key) })

	// A stranger with the right name and no secret.
	p := startDaemon(t, filepath.Join(dir, "p"), "--group", "alpha", "--public", "--bootstrap", status(t, c1).Addrs[0])
	cp := dialDaemon(t, p)
	pst := status(t, cp)
	waitFor(t, "a1 lists the stranger as refused", 30*time.Second, func() bool { return refusedAs(status(t, c1), pst.PeerID, "group") })

	// Rotate; a2 joins the new epoch at once, a3 never does.
	r := bin(t, "", "group", "rotate", "--home", h1)
	line2 := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(line2, "cmbnode-invite-1.") || line2 == line || !strings.Contains(r.stderr, "epoch 2") {
		t.Fatalf("group rotate: %+v", r)
	}
	// The new epoch was created before the command returned, so the grace
	// is over once grace has passed since now.
	rotated := time.Now()
	join(t, filepath.Join(dir, "a2"), line2)
	show := bin(t, "", "group", "show", "--home", h1)
	if show.code != 0 || !strings.Contains(show.stdout, "epoch 1") || !strings.Contains(show.stdout, "epoch 2") {
		t.Fatalf("group show: %+v", show)
	}
	for _, n := range []string{"1.key", "2.key"} {
		b, err := os.ReadFile(filepath.Join(h1, "groups", "alpha", n))
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Secret string }
		if err := json.Unmarshal(b, &f); err != nil || f.Secret == "" {
			t.Fatalf("secret file %s: %v", n, err)
		}
		for where, out := range map[string]string{"group show": show.stdout + show.stderr, "a1's log": a1.logs.String(), "status": bin(t, "", "status", "--json", "--home", h1).stdout} {
			if strings.Contains(out, f.Secret) {
				t.Errorf("%s shows the secret of %s", where, n)
			}
		}
	}

	a3ID := status(t, c3).PeerID
	// a2's reload of epoch 2 restarts its sessions, so the peer counts
	// below pass for a moment within the grace too: the wait also needs
	// the grace over and a1's refusal of a3.
	waitFor(t, "a1 and a2 cut a3 off after the grace", 60*time.Second, func() bool {
		return time.Since(rotated) > 15*time.Second && refusedAs(status(t, c1), a3ID, "epoch", "proof") &&
			status(t, c3).Peers == 0 && status(t, c1).Peers == 1 && status(t, c2).Peers == 1
	})
	before := status(t, c3).Counters
	after, err := c1.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "alpha after the grace"}})
	if err != nil {
		t.Fatal(err)
	}
	// Rogue hosts capture what a1 sends a stranger with the name and one
	// proving with a3's old secret, while a2 keeps receiving.
	g3, err := groupkey.LoadGroup(filepath.Join(dir, "a3"), "alpha")
	if err != nil {
		t.Fatal(err)
	}
	old, err := groupkey.New(g3, groupkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr1, tag := status(t, c1).Addrs[0], old.Tag()
	plain := []string{"alpha before the rotation", "alpha after the grace", first.Key, after.Key}
	strangerDial(t, addr1, tag, "alpha", nil, 0).refusedOnly(t, "a stranger with the name", cmb.CodeGroupMismatch, plain...)
	strangerDial(t, addr1, tag, tag, old, 1).refusedOnly(t, "a stranger with the old secret", cmb.CodeAuthFailed, plain...)
	waitFor(t, "a2, on the new epoch, stores the new record", 10*time.Second, func() bool { return has(t, c2, after.Key) })
	time.Sleep(3 * time.Second) // a redial and a catch-up round would have delivered it
	if st := status(t, c3); has(t, c3, after.Key) || st.Counters.Received != before.Received || st.Peers != 0 {
		t.Fatalf("a3, holding only the old secret, received after the grace: peers %d received %d → %d", st.Peers, before.Received, st.Counters.Received)
	}
	if !has(t, c3, first.Key) || !has(t, c2, first.Key) {
		t.Error("records of epoch 1 are no longer readable")
	}
	if st := status(t, cp); st.CMBs != 0 || st.Counters.Received != 0 || st.Peers != 0 {
		t.Errorf("the stranger holds or received alpha records: cmbs %d received %d peers %d", st.CMBs, st.Counters.Received, st.Peers)
	}
	// Each refusal is logged with the refused peer's address.
	logs := a1.logs.String() + a2.logs.String()
	for _, what := range []string{"mmp handshake refused", "group secret epoch has expired", "no valid group membership proof"} {
		if !slices.ContainsFunc(strings.Split(logs, "\n"), func(l string) bool {
			return strings.Contains(l, what) && strings.Contains(l, "addr=/ip4/127.0.0.1/tcp/")
		}) {
			t.Errorf("no log line with %q names the refused peer's address:\n%s", what, logs)
		}
	}
}

// TestDaemonCatchesUpAfterRestart: a daemon stopped while its peer authors
// 1,000 CMBs (threads of 10) holds all of them, lineage included, soon
// after it restarts.
func TestDaemonCatchesUpAfterRestart(t *testing.T) {
	dir := t.TempDir()
	createGroup(t, filepath.Join(dir, "a1"), "alpha")
	a1 := meshDaemon(t, filepath.Join(dir, "a1"), "alpha")
	c1 := dialDaemon(t, a1)
	boot := status(t, c1).Addrs[0]
	h2 := filepath.Join(dir, "a2")
	join(t, h2, invite(t, a1.home))
	a2 := meshDaemon(t, h2, "alpha", boot)
	waitFor(t, "peers", 30*time.Second, func() bool { return status(t, c1).Peers == 1 })
	if err := a2.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("a2 did not stop cleanly: %v", err)
	}

	ctx := context.Background()
	var keys []string
	prev := ""
	for i := 0; i < 1000; i++ {
		a := ipc.RememberArgs{Fields: map[string]any{"focus": fmt.Sprintf("offline update %d", i)}}
		if i%10 != 0 {
			a.Parents = []string{prev}
		}
		r, err := c1.Remember(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, r.Key)
		prev = r.Key
	}

	restarted := time.Now()
	a2 = meshDaemon(t, h2, "alpha", boot)
	c2 := dialDaemon(t, a2)
	waitFor(t, "a2 holds all 1,000", 30*time.Second, func() bool { return status(t, c2).CMBs == 1000 })
	t.Logf("a2 held all 1,000 CMBs %v after restart (caught up %d)", time.Since(restarted), status(t, c2).Counters.CaughtUp)
	for i, k := range keys {
		if !has(t, c2, k) {
			t.Fatalf("a2 lacks %s", k)
		}
		if i%10 == 9 {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			raw, err := c2.Call(lctx, ipc.TypeLineage, map[string]any{"key": k})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			var lin struct{ Ancestors []string }
			if err := json.Unmarshal(raw, &lin); err != nil || len(lin.Ancestors) != 9 {
				t.Fatalf("lineage of thread tail %s: %d ancestors (%v)", k, len(lin.Ancestors), err)
			}
		}
	}
}
