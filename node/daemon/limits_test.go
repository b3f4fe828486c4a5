package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// Issue #24: /metrics shows the local endpoints' limits being hit: the
// socket's idle timeout, room made at the connection limit and clients
// refused there; CGP's anchor cap and byte budget.
func TestMetricsShowLocalLimitsHit(t *testing.T) {
	ctx := context.Background()
	metricsAddr := freeAddr(t)
	d := start(t, t.TempDir(), Options{Overrides: Overrides{Metrics: &metricsAddr},
		IPC: ipc.Options{MaxConns: 3, MaxListeners: 3, HelloTimeout: 4 * time.Second}})
	c := client(t, d.socket)
	for i := range 20 {
		big := strings.Repeat(fmt.Sprintf("wide %02d ", i), 7<<10)
		if _, err := c.Remember(ctx, ipc.RememberArgs{Fields: map[string]any{"focus": "metrics note", "issue": big}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Query(ctx, json.RawMessage(`{"goal":"metrics note","kinds":["memory"],"max_frames":50,"max_tokens":10000000}`))
	if err != nil || !strings.Contains(string(res), `"truncated":true`) {
		t.Fatalf("query over the socket's budget: %.200s %v", res, err)
	}
	anchors, _ := json.Marshal(make([]string, 12000))
	var ie *ipc.Error
	if _, err := c.Query(ctx, json.RawMessage(`{"goal":"x","max_frames":1,"max_tokens":10,"anchors":`+string(anchors)+`}`)); !errors.As(err, &ie) || ie.Code != "bad_request" {
		t.Fatalf("12,000 anchors: %v", err)
	}

	dial := func() net.Conn {
		nc, err := net.Dial("unix", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	gone := func(nc net.Conn) {
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := bufio.NewReader(nc).ReadByte(); err == nil {
			t.Fatal("silent connection was sent something instead of closed")
		}
	}
	// Two silent connections fill the socket; a third client takes the
	// place of the older one, which is then closed. (HelloTimeout is long
	// enough that the older is still there to be replaced.)
	silent := dial()
	dial()
	l := client(t, d.socket)
	if err := l.Listen(ctx); err != nil {
		t.Fatalf("client at the connection limit: %v", err)
	}
	gone(silent)
	if err := c.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	// The other silent one is closed by HelloTimeout; then, with every
	// connection listening, a new client is refused.
	waitStat(t, metricsAddr, "cmbnode_socket_idle_closed_total 1")
	l2 := client(t, d.socket)
	if err := l2.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	refused := dial()
	line, _ := bufio.NewReader(refused).ReadString('\n')
	if !strings.Contains(line, "too many clients") {
		t.Fatalf("refused client got %q", line)
	}

	page := httpGet(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		"\ncmbnode_socket_idle_closed_total 1\n", "\ncmbnode_socket_evicted_total 1\n", "\ncmbnode_socket_refused_total 1\n",
		"\ncmbnode_socket_clients 3\n", "\n# TYPE cmbnode_socket_dropped_total counter\n",
		"\ncmbnode_socket_listeners 3\n", "\ncmbnode_socket_listen_refused_total 0\n",
		"\ncmbnode_cgp_queries_total 2\n", "\ncmbnode_cgp_anchors_refused_total 1\n",
		"\ncmbnode_cgp_results_truncated_bytes_total 1\n", "\ncmbnode_cgp_busy_total 0\n", "\ncmbnode_cgp_deadline_exceeded_total 0\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics page lacks %q", strings.TrimSpace(want))
		}
	}
}

func waitStat(t *testing.T, addr, line string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(httpGet(t, "http://"+addr+"/metrics"), "\n"+line+"\n") {
			return
		}
	}
	t.Fatalf("metrics never showed %s", line)
}
