package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"cmbnode/node/ipc"
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

func dialDaemon(t *testing.T, d *daemonProc) *ipc.Client { return dialSock(t, d.sock) }

// dialSock connects a test client to a daemon socket; it is closed when the
// test ends, or earlier by the caller.
func dialSock(t *testing.T, sock string) *ipc.Client {
	t.Helper()
	c, err := ipc.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func status(t *testing.T, c *ipc.Client) ipc.StatusReply {
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
func waitFor(t *testing.T, what string, deadline time.Duration, cond func() bool) time.Duration {
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

func has(t *testing.T, c *ipc.Client, key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Call(ctx, ipc.TypeGet, map[string]any{"key": key})
	return err == nil
}

// TestDaemonsMeshAndIsolateGroups: three daemons in alpha and one in beta,
// all bootstrapped to the first, as separate processes. A CMB remembered on
// one alpha daemon reaches the other two; beta never holds or receives it.
func TestDaemonsMeshAndIsolateGroups(t *testing.T) {
	dir := t.TempDir()
	a1 := meshDaemon(t, filepath.Join(dir, "a1"), "alpha")
	c1 := dialDaemon(t, a1)
	boot := status(t, c1).Addrs[0]
	a2 := meshDaemon(t, filepath.Join(dir, "a2"), "alpha", boot)
	a3 := meshDaemon(t, filepath.Join(dir, "a3"), "alpha", boot)
	b1 := meshDaemon(t, filepath.Join(dir, "b1"), "beta", boot, status(t, dialDaemon(t, a2)).Addrs[0])
	c2, c3, cb := dialDaemon(t, a2), dialDaemon(t, a3), dialDaemon(t, b1)

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

	// Give beta every chance to (wrongly) receive it.
	time.Sleep(500 * time.Millisecond)
	st := status(t, cb)
	if has(t, cb, res.Key) || st.CMBs != 0 || st.Counters.Received != 0 || st.Peers != 0 {
		t.Fatalf("beta holds or received alpha traffic: cmbs %d received %d peers %d", st.CMBs, st.Counters.Received, st.Peers)
	}
	if st := status(t, c2); st.Counters.Accepted < 1 {
		t.Fatalf("a2 counters: %+v", st.Counters)
	}
}

// TestDaemonCatchesUpAfterRestart: a daemon stopped while its peer authors
// 1,000 CMBs (threads of 10) holds all of them, lineage included, soon
// after it restarts.
func TestDaemonCatchesUpAfterRestart(t *testing.T) {
	dir := t.TempDir()
	a1 := meshDaemon(t, filepath.Join(dir, "a1"), "alpha")
	c1 := dialDaemon(t, a1)
	boot := status(t, c1).Addrs[0]
	h2 := filepath.Join(dir, "a2")
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
