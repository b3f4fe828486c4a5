package mcpnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// daemonLink is the server's one connection to the daemon socket, dialled
// on first use and again after it breaks, so a host that starts the server
// before the daemon (or keeps it across a daemon restart) gets answers once
// the daemon is up. It is safe for concurrent use.
type daemonLink struct {
	path string
	home string

	mu sync.Mutex
	c  *ipc.Client
}

func (d *daemonLink) client(ctx context.Context) (*ipc.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c != nil {
		return d.c, nil
	}
	c, err := ipc.Dial(ctx, d.path)
	if err != nil {
		return nil, d.noDaemon(err)
	}
	d.c = c
	return c, nil
}

func (d *daemonLink) drop(c *ipc.Client) {
	d.mu.Lock()
	if d.c == c {
		d.c = nil
	}
	d.mu.Unlock()
	c.Close()
}

// do runs f on the connection; when the connection broke (not when the
// daemon answered with an error) it redials once, so one restart of the
// daemon costs a host no failed call.
func (d *daemonLink) do(ctx context.Context, f func(*ipc.Client) error) error {
	for attempt := 0; ; attempt++ {
		c, err := d.client(ctx)
		if err != nil {
			return err
		}
		err = f(c)
		var ie *ipc.Error
		switch {
		case err == nil, errors.As(err, &ie), ctx.Err() != nil:
			return err
		}
		d.drop(c)
		if attempt > 0 {
			return d.noDaemon(err)
		}
	}
}

func (d *daemonLink) close() {
	d.mu.Lock()
	c := d.c
	d.c = nil
	d.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// noDaemon words a failure to reach the daemon for the model and the
// person behind it: which socket, and the command that fixes it.
func (d *daemonLink) noDaemon(err error) error {
	home := ""
	if d.home != "" {
		home = " --home " + d.home
	}
	fix := fmt.Sprintf("start it with `cmbnode daemon%s`, then retry", home)
	if errors.Is(err, ipc.ErrNoDaemon) {
		return fmt.Errorf("%w at %s (this MCP server only talks to the daemon's socket): %s", ipc.ErrNoDaemon, d.path, fix)
	}
	return fmt.Errorf("cannot reach the cmbnode daemon at %s (%v): if it is not running, %s", d.path, err, fix)
}

// nameCache maps author nodeIds to the names they go by on the daemon,
// asking the daemon (`authors`) only for ids it has not seen lately: a
// name, once known, rarely changes; an unknown one is asked again after
// unknownTTL, since the author may handshake in the meantime.
type nameCache struct {
	mu sync.Mutex
	m  map[string]nameEntry
}

type nameEntry struct {
	name string
	at   time.Time
}

const (
	unknownTTL   = 30 * time.Second
	maxNameCache = 4096
)

func (n *nameCache) put(id, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil || len(n.m) >= maxNameCache {
		n.m = map[string]nameEntry{} // bound the cache; refilling costs one request
	}
	n.m[strings.ToLower(id)] = nameEntry{name: name, at: time.Now()}
}

// names returns a name for each of ids it can find, asking the daemon once
// for the ones not cached.
func (n *nameCache) names(ctx context.Context, d *daemonLink, ids []string) map[string]string {
	out := make(map[string]string, len(ids))
	var miss []string
	now := time.Now()
	n.mu.Lock()
	for _, id := range ids {
		e, ok := n.m[strings.ToLower(id)]
		switch {
		case ok && e.name != "":
			out[id] = e.name
		case ok && now.Sub(e.at) < unknownTTL:
		default:
			miss = append(miss, id)
		}
	}
	n.mu.Unlock()
	if len(miss) == 0 {
		return out
	}
	var got map[string]string
	err := d.do(ctx, func(c *ipc.Client) (err error) {
		got, err = c.AuthorNames(ctx, miss)
		return err
	})
	if err != nil {
		return out // names are a courtesy: the nodeIds still identify authors
	}
	for _, id := range miss {
		n.put(id, got[id])
		if got[id] != "" {
			out[id] = got[id]
		}
	}
	return out
}

// idsFor finds the nodeId a name stands for among the cached names.
func (n *nameCache) idsFor(name string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []string
	for id, e := range n.m {
		if e.name != "" && strings.EqualFold(e.name, name) {
			ids = append(ids, id)
		}
	}
	return ids
}
