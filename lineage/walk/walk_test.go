package walk

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// graph is an in-memory Graph. It lists children newest first, the
// opposite of the order walks take them in, so a walk that relied on the
// store's order would show it.
type graph map[string]Vertex

func (g graph) add(key string, created time.Time, parents ...string) {
	g[key] = Vertex{Key: key, CreatedAt: created, Parents: parents}
}

func (g graph) Vertex(_ context.Context, key string) (Vertex, bool, error) {
	v, ok := g[key]
	return v, ok, nil
}

func (g graph) Children(_ context.Context, key string) ([]string, error) {
	var kids []string
	for k, v := range g {
		if slices.Contains(v.Parents, key) {
			kids = append(kids, k)
		}
	}
	slices.SortFunc(kids, func(a, b string) int { return -byTime(g[a].CreatedAt, a, g[b].CreatedAt, b) })
	return kids, nil
}

// family is
//
//	  r
//	 / \
//	a   b
//	 \ / \
//	  c   d
//	  |
//	  e      (created after its child f: the author's clock was ahead)
//	  |
//	  f
//
// plus b2, a child of r created at the same time as b, and "ghost", a
// parent c names that is not held.
func family() graph {
	g := graph{}
	g.add("r", at(0))
	g.add("a", at(10), "r")
	g.add("b", at(20), "r")
	g.add("b2", at(20), "r")
	g.add("c", at(30), "b", "a", "ghost")
	g.add("d", at(50), "b")
	g.add("e", at(70), "c")
	g.add("f", at(32), "e")
	return g
}

func keys(nodes []Node) string {
	ks := make([]string, len(nodes))
	for i, n := range nodes {
		ks[i] = n.Key
	}
	return strings.Join(ks, " ")
}

func depths(nodes []Node) string {
	ks := make([]string, len(nodes))
	for i, n := range nodes {
		ks[i] = n.Key + ":" + string(rune('0'+n.Depth))
	}
	return strings.Join(ks, " ")
}

func TestThread(t *testing.T) {
	ctx := context.Background()
	g := family()
	asOf := at(35)
	for _, c := range []struct {
		name string
		o    ThreadOptions
		want string
	}{
		// Ancestors by parent links, descendants by child links: d (b's
		// other child) and b2 (r's other child) are relatives, not thread.
		{"unbounded", ThreadOptions{}, "r a b c f e"},
		{"depth 1", ThreadOptions{MaxDepth: 1}, "a b c e"},
		// Nearest first; within a hop ancestors (oldest first) before
		// descendants: c, then a b (parents), then e (child), then r.
		{"3 members", ThreadOptions{MaxMembers: 3}, "a b c"},
		{"4 members", ThreadOptions{MaxMembers: 4}, "a b c e"},
		{"5 members", ThreadOptions{MaxMembers: 5}, "r a b c e"},
		// e is created after as_of, so f, created before it but reached
		// only through e, is not a member either.
		{"as of", ThreadOptions{AsOf: &asOf}, "r a b c"},
	} {
		got, err := Thread(ctx, g, "c", c.o)
		if err != nil {
			t.Fatal(err)
		}
		if keys(got) != c.want {
			t.Errorf("%s: thread %q, want %q", c.name, keys(got), c.want)
		}
	}
	// Equal creation times: the smaller key is taken first and listed first.
	if got, _ := Thread(ctx, g, "r", ThreadOptions{MaxMembers: 3}); keys(got) != "r a b" {
		t.Errorf("ties by key: %q", keys(got))
	}
	if got, _ := Thread(ctx, g, "r", ThreadOptions{MaxDepth: 1}); keys(got) != "r a b b2" {
		t.Errorf("tied members in key order: %q", keys(got))
	}
	before := at(29)
	if got, err := Thread(ctx, g, "c", ThreadOptions{AsOf: &before}); err != nil || len(got) != 0 {
		t.Errorf("focal created after as_of: %v %v", got, err)
	}
	if _, err := Thread(ctx, g, "ghost", ThreadOptions{}); !errors.Is(err, ErrNotHeld) {
		t.Errorf("thread of a record not held: %v", err)
	}
}

// TestThreadAsOfMillisecond: as_of is compared with creation times cut to
// the millisecond, the precision records and frames carry.
func TestThreadAsOfMillisecond(t *testing.T) {
	ctx := context.Background()
	g := graph{}
	g.add("p", at(0))
	g.add("same-ms", at(1).Add(900*time.Microsecond), "p")
	g.add("next-ms", at(2), "p")
	asOf := at(1).Add(500 * time.Microsecond)
	got, err := Thread(ctx, g, "p", ThreadOptions{AsOf: &asOf})
	if err != nil || keys(got) != "p same-ms" {
		t.Errorf("thread as of %v: %q %v", asOf, keys(got), err)
	}
}

func TestAncestorsDescendants(t *testing.T) {
	ctx := context.Background()
	g := family()
	for _, c := range []struct {
		name string
		walk func(context.Context, Graph, string, int) ([]Node, error)
		key  string
		max  int
		want string
	}{
		{"ancestors", Ancestors, "f", 0, "e:1 c:2 a:3 b:3 r:4"},
		{"ancestors within 2", Ancestors, "f", 2, "e:1 c:2"},
		{"descendants", Descendants, "r", 0, "a:1 b:1 b2:1 c:2 d:2 e:3 f:4"},
		{"descendants within 1", Descendants, "b", 1, "c:1 d:1"},
		{"no ancestors", Ancestors, "r", 0, ""},
	} {
		got, err := c.walk(ctx, g, c.key, c.max)
		if err != nil {
			t.Fatal(err)
		}
		if depths(got) != c.want {
			t.Errorf("%s of %s: %q, want %q", c.name, c.key, depths(got), c.want)
		}
	}
	if _, err := Descendants(ctx, g, "ghost", 0); !errors.Is(err, ErrNotHeld) {
		t.Errorf("walk from a record not held: %v", err)
	}
}

func TestHops(t *testing.T) {
	ctx := context.Background()
	g := family()
	got, err := Hops(ctx, g, []string{"d", "a", "ghost", "a"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Each record at its distance from the nearer start; siblings are 2
	// apart (b2 via r), f is 3 from a and not returned.
	if want := "a:0 d:0 b:1 c:1 r:1 b2:2 e:2"; depths(got) != want {
		t.Errorf("hops: %q, want %q", depths(got), want)
	}
	if got, err := Hops(ctx, g, nil, 2); err != nil || len(got) != 0 {
		t.Errorf("hops from nothing: %v %v", got, err)
	}
	if got, _ := Hops(ctx, g, []string{"f"}, 0); len(got) != len(g) {
		t.Errorf("unbounded hops reach %d of %d", len(got), len(g))
	}
}

func TestDistance(t *testing.T) {
	ctx := context.Background()
	g := family()
	for _, c := range []struct {
		a, b string
		max  int
		want int
	}{
		{"a", "a", 0, 0},
		{"a", "b", 0, 2}, // siblings
		{"a", "f", 0, 3},
		{"f", "a", 3, 3},
		{"d", "b2", 0, 3},
	} {
		if got, err := Distance(ctx, g, c.a, c.b, c.max); err != nil || got != c.want {
			t.Errorf("distance(%s, %s, %d) = %d, %v; want %d", c.a, c.b, c.max, got, err, c.want)
		}
	}
	if _, err := Distance(ctx, g, "a", "f", 2); !errors.Is(err, ErrNoPath) {
		t.Errorf("beyond the bound: %v", err)
	}
	for _, pair := range [][2]string{{"a", "ghost"}, {"ghost", "a"}, {"ghost", "ghost"}} {
		if _, err := Distance(ctx, g, pair[0], pair[1], 0); !errors.Is(err, ErrNotHeld) {
			t.Errorf("distance %v: %v", pair, err)
		}
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Thread(ctx, family(), "c", ThreadOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled thread: %v", err)
	}
}
