package ipc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// collidingFoci finds two focus texts whose root records' keys share their
// first n digest characters: a root's address depends on its texts only.
func collidingFoci(t *testing.T, n int) (string, string, string) {
	t.Helper()
	seen := map[string]string{}
	for i := 0; i < 1_000_000; i++ {
		focus := fmt.Sprintf("prefix probe %d", i)
		texts := [cmb.NumFields]string{focus, cmb.Neutral, cmb.Neutral, cmb.Neutral, cmb.Neutral, cmb.Neutral, cmb.Neutral}
		k := cmb.AddressV1(&texts, nil, "")
		p := k[:len(cmb.PrefixV1)+n]
		if other, ok := seen[p]; ok {
			return other, focus, p
		}
		seen[p] = focus
	}
	t.Fatal("no colliding prefix found")
	return "", "", ""
}

// TestGetByKeyPrefix: get, lineage and thread take a unique key prefix
// (with or without the scheme, any case); an ambiguous one is a
// bad_request naming the matches, an unmatched one not_found, a short or
// non-hex one bad_request.
func TestGetByKeyPrefix(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := ctxT(t)
	fa, fb, shared := collidingFoci(t, node.MinKeyPrefix)
	ra, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fa}})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fb}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ra.Key, shared) || !strings.HasPrefix(rb.Key, shared) {
		t.Fatalf("keys %s %s do not share %s: the address assumption is wrong", ra.Key, rb.Key, shared)
	}
	// The shortest unique prefix of a: one character past the shared part
	// (the two keys differ somewhere after it).
	i := len(shared)
	for ra.Key[i] == rb.Key[i] {
		i++
	}
	unique := ra.Key[:i+1]
	for _, ref := range []string{ra.Key, unique, strings.TrimPrefix(unique, cmb.PrefixV1), strings.ToUpper(unique)} {
		g, err := c.Get(ctx, ref)
		if err != nil {
			t.Fatalf("get %q: %v", ref, err)
		}
		rec, err := cmb.Decode(g.CMB)
		if err != nil || rec.Key != ra.Key {
			t.Fatalf("get %q: got %s (%v)", ref, g.CMB, err)
		}
	}
	if l, err := c.Lineage(ctx, unique, 0); err != nil || l.Key != ra.Key {
		t.Fatalf("lineage by prefix: %+v %v", l, err)
	}
	if th, err := c.Thread(ctx, unique, 0); err != nil || th.Key != ra.Key {
		t.Fatalf("thread by prefix: %+v %v", th, err)
	}

	_, err = c.Get(ctx, shared)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeBadRequest || !strings.Contains(e.Message, ra.Key) || !strings.Contains(e.Message, rb.Key) {
		t.Fatalf("ambiguous prefix %s: %v", shared, err)
	}
	none := cmb.PrefixV1 + strings.Repeat("0", 20)
	if none == ra.Key[:len(none)] || none == rb.Key[:len(none)] {
		t.Fatal("the unmatched prefix matches")
	}
	if _, err := c.Get(ctx, none); !errors.As(err, &e) || e.Code != CodeNotFound {
		t.Fatalf("unmatched prefix: %v", err)
	}
	for _, bad := range []string{"cmb1-ab", "abc", "cmb1-zzzzzz", "hello world"} {
		if _, err := c.Get(ctx, bad); !errors.As(err, &e) || e.Code != CodeBadRequest {
			t.Fatalf("get %q: %v, want bad_request", bad, err)
		}
	}
}

// TestRecent: newest first, bounded by limit, filtered by author and since.
func TestRecent(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := ctxT(t)
	var keys []string
	for i := 0; i < 6; i++ {
		r, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprintf("recent %d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, r.Key)
	}
	all, err := c.Recent(ctx, RecentArgs{})
	if err != nil || len(all) != 6 {
		t.Fatalf("recent: %d %v", len(all), err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].CreatedAt > all[i-1].CreatedAt {
			t.Fatalf("recent is not newest first: %+v", all)
		}
	}
	if all[0].Fields["focus"].Text == "" || all[0].CreatedBy != ts.node.Identity().NodeID {
		t.Fatalf("recent entry: %+v", all[0])
	}
	two, err := c.Recent(ctx, RecentArgs{Limit: 2})
	if err != nil || len(two) != 2 || two[0].Key != all[0].Key {
		t.Fatalf("recent limit 2: %+v %v", two, err)
	}
	since := all[2].CreatedAt
	got, err := c.Recent(ctx, RecentArgs{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got {
		if m.CreatedAt < since {
			t.Fatalf("recent since %d returned %d", since, m.CreatedAt)
		}
	}
	if len(got) < 3 {
		t.Fatalf("recent since the third newest: %d", len(got))
	}
	if mine, err := c.Recent(ctx, RecentArgs{Author: ts.node.Identity().NodeID}); err != nil || len(mine) != 6 {
		t.Fatalf("recent by self: %d %v", len(mine), err)
	}
	if other, err := c.Recent(ctx, RecentArgs{Author: "01a22b06-79d8-7d64-9a71-0e01f73a03b5"}); err != nil || len(other) != 0 {
		t.Fatalf("recent by a stranger: %+v %v", other, err)
	}
	r := dialRaw(t, ts.path)
	wantError(t, r.call(`{"type":"recent","limit":-1}`), CodeBadRequest)
	wantError(t, r.call(`{"type":"recent","limit":"ten"}`), CodeBadRequest)
	wantError(t, r.call(`{"type":"recent","limit":5000}`), CodeBadRequest)
}

// TestThread: a chain root → mid → tip plus a sibling remix of root; the
// thread of mid is root (ancestor), mid (focal), tip (descendant), in that
// order, and leaves the sibling out (it is neither above nor below mid).
func TestThread(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := ctxT(t)
	rem := func(focus string, parents ...string) string {
		r, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": focus}, Parents: parents})
		if err != nil {
			t.Fatal(err)
		}
		return r.Key
	}
	root := rem("thread root")
	mid := rem("thread mid", root)
	tip := rem("thread tip", mid)
	sib := rem("thread sibling", root)
	th, err := c.Thread(ctx, mid, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range th.Members {
		got = append(got, m.Role+":"+m.Key)
		if m.Fields["focus"].Text == "" {
			t.Fatalf("member without fields: %+v", m)
		}
	}
	want := []string{"ancestor:" + root, "focal:" + mid, "descendant:" + tip}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("thread of mid:\n got %v\nwant %v (sibling %s)", got, want, sib)
	}
	if th, err := c.Thread(ctx, root, 2); err != nil || len(th.Members) != 2 || th.Members[0].Role != node.RoleFocal {
		t.Fatalf("thread of root, limit 2: %+v %v", th, err)
	}
	var e *Error
	if _, err := c.Thread(ctx, cmb.PrefixV1+strings.Repeat("a", 64), 0); !errors.As(err, &e) || e.Code != CodeNotFound {
		t.Fatalf("thread of an unheld key: %v", err)
	}
}

// TestAuthors: the daemon's own nodeId maps to its name; unknown ones are
// absent; a missing or mistyped nodeIds is bad_request.
func TestAuthors(t *testing.T) {
	ts := startServer(t, nil)
	c := dialClient(t, ts.path)
	ctx := ctxT(t)
	self := ts.node.Identity().NodeID
	names, err := c.AuthorNames(ctx, []string{self, "01a22b06-79d8-7d64-9a71-0e01f73a03b5"})
	if err != nil || len(names) != 1 || names[self] != "ipc-test" {
		t.Fatalf("authors: %v %v", names, err)
	}
	r := dialRaw(t, ts.path)
	wantError(t, r.call(`{"type":"authors"}`), CodeBadRequest)
	wantError(t, r.call(`{"type":"authors","nodeIds":"x"}`), CodeBadRequest)
}
