package main

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// cmdList lists the newest memories without a query, through the socket's
// recent request.
func cmdList(e *env, args []string) error {
	fs := newFlags(e, "list", "list [--since D] [--author NAME] [--limit N] [--home DIR] [--json]")
	home, asJSON := clientFlags(fs)
	since := fs.Duration("since", 0, "only memories at most this old, e.g. 1h, 30m (0: any age)")
	author := fs.String("author", "", "only memories by this author: a nodeId, or a node's name")
	limit := fs.Int("limit", 20, "at most this many (1–1000)")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit must be between 1 and 1000")
	}
	if *since < 0 {
		return usagef("--since must not be negative")
	}
	s, done, err := connect(e, *home)
	if err != nil {
		return err
	}
	defer done()
	a := ipc.RecentArgs{Author: *author, Limit: *limit}
	now := time.Now()
	if *since > 0 {
		a.Since = now.Add(-*since).UnixMilli()
	}
	mem, err := s.c.Recent(s.ctx, a)
	if err != nil {
		return daemonErr(err)
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{"results": mem})
	}
	if len(mem) == 0 {
		fmt.Fprintln(e.stdout, "no memories")
		return nil
	}
	var ids []string
	for _, m := range mem {
		ids = append(ids, m.CreatedBy)
	}
	names, err := s.c.AuthorNames(s.ctx, uniq(ids))
	if err != nil {
		names = nil // a list without names is still a list
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tKEY\tAUTHOR\tFOCUS")
	for _, m := range mem {
		by := cmp.Or(names[m.CreatedBy], truncate(m.CreatedBy, 13))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", relTime(time.UnixMilli(m.CreatedAt), now), m.Key, truncate(by, 24), truncate(m.Fields["focus"].Text, 60))
	}
	return tw.Flush()
}

func uniq(l []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range l {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// cmdForget forgets a memory on this node only.
func cmdForget(e *env, args []string) error {
	key, asJSON, s, done, err := keyCall(e, "forget", args)
	if err != nil {
		return err
	}
	defer done()
	res, err := s.c.Forget(s.ctx, key)
	if err != nil {
		return daemonErr(err)
	}
	if asJSON {
		return writeJSON(e.stdout, res)
	}
	var b strings.Builder
	switch {
	case res.Already:
		fmt.Fprintf(&b, "%s was already forgotten on this node", res.Key)
	case res.KeptForLineage:
		fmt.Fprintf(&b, "forgot %s on this node; it is kept hidden because held memories build on it, so their lineage still walks", res.Key)
	default:
		fmt.Fprintf(&b, "forgot %s on this node", res.Key)
	}
	b.WriteString(" (local only: peers keep their copies; this node will not fetch or accept it again)")
	fmt.Fprintln(e.stdout, b.String())
	return nil
}
