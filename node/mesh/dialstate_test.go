package mesh_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/mesh"
)

// records is a slog.Handler that keeps every record, for tests that
// check what was logged at which level.
type records struct {
	mu  *sync.Mutex
	all *[]slog.Record
}

func newRecords() records { return records{mu: &sync.Mutex{}, all: &[]slog.Record{}} }

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	*r.all = append(*r.all, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// count is how many records at level have a message containing msg.
func (r records) count(level slog.Level, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range *r.all {
		if rec.Level == level && strings.Contains(rec.Message, msg) {
			n++
		}
	}
	return n
}

// A bootstrap address nobody listens on (a closed loopback port): status
// reports it configured, not connected, with the dial's cause; the first
// failure is logged at WARN, the retries after it at DEBUG only.
func TestUnreachableBootstrapReported(t *testing.T) {
	logs := newRecords()
	addr := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", deadPorts(t, 1)[0], randomPeerID(t))
	mb := newMember(t, "alpha", "lonely", nil, func(c *mesh.Config) {
		c.Bootstrap = []string{addr}
		c.Logger = slog.New(logs)
	})
	eventually(t, 20*time.Second, "the bootstrap dial has failed and been retried twice", func() bool {
		return logs.count(slog.LevelDebug, "bootstrap dial failed") >= 2
	})
	bs := mb.m.Bootstrap()
	if len(bs) != 1 || bs[0].Addr != addr || bs[0].Connected || bs[0].LastError != "connection refused" {
		t.Errorf("bootstrap reported as %+v, want %s not connected, last error connection refused", bs, addr)
	}
	if st := mb.n.Status(); len(st.Bootstrap) != 1 || st.Bootstrap[0].LastError != "connection refused" {
		t.Errorf("node status carries bootstrap %+v", st.Bootstrap)
	}
	if n := logs.count(slog.LevelWarn, "cannot reach a bootstrap peer"); n != 1 {
		t.Errorf("%d WARN lines for the unreachable bootstrap, want exactly 1 (the first failure)", n)
	}
}

// A bootstrap peer of another group is refused, and status says so; the
// same peer restarted in our group (same identity, same address) presents
// a handshake that passes, and that ends the 10-minute hold at once: it
// is reported no more, `connect` to it works, and once it restarts again
// without dialling us we dial it again within seconds.
func TestRefusalClearedByChangedHandshake(t *testing.T) {
	port := deadPorts(t, 1)[0]
	listen := func(c *mesh.Config) { c.Listen = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)} }
	p := newMember(t, "beta", "mover", nil, with(public, listen))
	v := newMember(t, "alpha", "victim", []*member{p}, public)
	eventually(t, 20*time.Second, "the victim refuses the peer of group beta", func() bool {
		rs := v.m.Refused()
		return len(rs) == 1 && rs[0].PeerID == p.m.PeerID() && rs[0].Reason == "group" && rs[0].Group == "beta"
	})
	if bs := v.m.Bootstrap(); len(bs) != 1 || bs[0].Connected || bs[0].LastError != "refused: another group" {
		t.Errorf("bootstrap reported as %+v, want not connected, refused: another group", bs)
	}
	if st := v.n.Status(); len(st.Refused) != 1 {
		t.Errorf("node status carries refused %+v", st.Refused)
	}

	// The peer moves to alpha and dials the victim.
	p.stop()
	p.grp = "alpha"
	p.start([]*member{v})
	eventually(t, 20*time.Second, "the victim admits the peer after its changed handshake", func() bool { return v.m.PeerCount() == 1 })
	if rs := v.m.Refused(); len(rs) != 0 {
		t.Errorf("still reported refused after a handshake that passed: %+v", rs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := v.m.Connect(ctx, p.m.Addrs()[0]); err != nil {
		t.Errorf("connect to the admitted peer: %v", err)
	}

	// It restarts once more and dials nobody: the victim's bootstrap loop,
	// no longer held, reconnects it.
	p.stop()
	eventually(t, 20*time.Second, "the victim sees the peer leave", func() bool { return v.m.PeerCount() == 0 })
	p.start(nil)
	eventually(t, 30*time.Second, "the victim re-dials its bootstrap peer, within seconds, not 10 minutes", func() bool { return v.m.PeerCount() == 1 })
	if bs := v.m.Bootstrap(); len(bs) != 1 || !bs[0].Connected {
		t.Errorf("bootstrap reported as %+v, want connected", bs)
	}
}
