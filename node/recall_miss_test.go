package node

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/store"
)

// missCounts tallies a ranking's missed evidence turns by why.
type missCounts struct {
	evidence int // evidence turns asked for
	found    int // in the top 10
	// Why the rest are missed:
	absent  int // not a candidate at all (no own or thread evidence)
	crowded int // would be in the top 10 but for records there lent most of their score by a neighbour ranked above them
	near    int // ranked 11–20
	far     int // ranked 21+
	// leadIn: a missed turn whose parent (the turn it replies to) is in the top 10.
	leadIn int
	// oneSession: a missed turn of a question whose evidence spans sessions, while the top 10 holds turns of fewer sessions than its evidence.
	oneSession int
}

// missBreakdown ranks every question of d on n (filled, byKey) and
// tallies each missed evidence turn by question kind and by why; if
// missLog is not nil, it writes each miss there with the top 12.
func missBreakdown(ctx context.Context, d *evalDataset, n *Node, byKey map[string]int, chained bool, missLog io.Writer) (map[string]*missCounts, error) {
	out := map[string]*missCounts{}
	keyOf := make(map[int]string, len(byKey))
	for k, i := range byKey {
		keyOf[i] = k
	}
	parent := func(i int) int {
		if chained && i > 0 && d.turns[i-1].session == d.turns[i].session {
			return i - 1
		}
		return -1
	}
	child := func(i int) int {
		if chained && i+1 < len(d.turns) && d.turns[i+1].session == d.turns[i].session {
			return i + 1
		}
		return -1
	}
	for _, q := range d.questions {
		ranked, err := n.rank(ctx, q.text, 10, n.now())
		if err != nil {
			return nil, err
		}
		var keys []string
		for _, r := range ranked {
			keys = append(keys, r.key)
		}
		own, err := n.st.Relevance(ctx, q.text, keys, store.SearchOptions{AsOf: n.now(), FieldWeights: n.rp.fields, K1: n.rp.k1, B: n.rp.b})
		if err != nil {
			return nil, err
		}
		pos := map[int]int{} // turn → rank (0-based)
		for i, r := range ranked {
			pos[byKey[r.key]] = i
		}
		// Records in the top 10 whose score is mostly lent by a
		// neighbour ranked above them.
		lent := 0
		sessions := map[int]bool{}
		for i := 0; i < min(10, len(ranked)); i++ {
			t := byKey[ranked[i].key]
			sessions[d.turns[t].session] = true
			if own[ranked[i].key] >= ranked[i].relevance/2 {
				continue
			}
			for _, nb := range []int{parent(t), child(t)} {
				if j, ok := pos[nb]; ok && nb >= 0 && j < i {
					lent++
					break
				}
			}
		}
		evSessions := map[int]bool{}
		for _, e := range q.evidence {
			evSessions[d.turns[e].session] = true
		}
		if missLog != nil {
			for _, e := range q.evidence {
				if j, ok := pos[e]; !ok || j >= 10 {
					evOwn, _ := n.st.Relevance(ctx, q.text, []string{keyOf[e]}, store.SearchOptions{AsOf: n.now(), FieldWeights: n.rp.fields, K1: n.rp.k1, B: n.rp.b})
					fmt.Fprintf(missLog, "MISS %s %q\n  ev %d rank %d (present %v) own %.3f: %s: %s\n", q.kind, q.text, e, j, ok, evOwn[keyOf[e]], d.turns[e].speaker, d.turns[e].text)
					if p := parent(e); p >= 0 {
						jp, okp := pos[p]
						fmt.Fprintf(missLog, "  parent rank %d (%v): %s: %s\n", jp, okp, d.turns[p].speaker, d.turns[p].text)
					}
					for i := 0; i < min(12, len(ranked)); i++ {
						t := byKey[ranked[i].key]
						fmt.Fprintf(missLog, "   %2d %.3f own %.3f s%d %s: %s\n", i, ranked[i].relevance, own[ranked[i].key], d.turns[t].session, d.turns[t].speaker, d.turns[t].text)
					}
				}
			}
		}
		for _, kind := range []string{q.kind, "all"} {
			c := out[kind]
			if c == nil {
				c = &missCounts{}
				out[kind] = c
			}
			for _, e := range q.evidence {
				c.evidence++
				j, ok := pos[e]
				switch {
				case ok && j < 10:
					c.found++
					continue
				case !ok:
					c.absent++
				case j < 10+lent:
					c.crowded++
				case j < 20:
					c.near++
				default:
					c.far++
				}
				if p := parent(e); p >= 0 {
					if j, ok := pos[p]; ok && j < 10 {
						c.leadIn++
					}
				}
				if len(evSessions) > 1 && len(sessions) < len(evSessions) {
					c.oneSession++
				}
			}
		}
	}
	return out, nil
}

// BenchmarkRecallHardMisses prints, for the current ranking on the
// harder set (seeds as BenchmarkRecallEvalHard takes them), flat and
// chained, how many evidence turns are missed by question kind and why:
// not a candidate (neither among the text hits nor their neighbours),
// crowded out by records lent most of their score by a neighbour ranked
// above them, ranked 11–20, ranked 21+; and of the missed, how many have
// their lead-in in the top 10, and how many belong to a question whose
// evidence spans more sessions than its top 10 does. RECALL_MISS_LOG
// names a file to write each miss to, with the question's top 12.
func BenchmarkRecallHardMisses(b *testing.B) {
	ctx := context.Background()
	var missLog io.Writer
	if p := os.Getenv("RECALL_MISS_LOG"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		missLog = f
	}
	for _, chained := range []bool{false, true} {
		name := map[bool]string{false: "flat", true: "chained"}[chained]
		b.Run(name, func(b *testing.B) {
			for range b.N {
				total := map[string]*missCounts{}
				for _, seed := range evalSeeds(b) {
					d := newHardDataset(seed, 10, 19)
					n := openEvalNode(b)
					byKey, err := d.fill(ctx, n, chained)
					if err != nil {
						b.Fatal(err)
					}
					m, err := missBreakdown(ctx, d, n, byKey, chained, missLog)
					if err != nil {
						b.Fatal(err)
					}
					n.Close()
					for k, c := range m {
						if total[k] == nil {
							total[k] = &missCounts{}
						}
						t := total[k]
						t.evidence += c.evidence
						t.found += c.found
						t.absent += c.absent
						t.crowded += c.crowded
						t.near += c.near
						t.far += c.far
						t.leadIn += c.leadIn
						t.oneSession += c.oneSession
					}
				}
				var sb strings.Builder
				for _, k := range slices.Sorted(maps.Keys(total)) {
					c := total[k]
					miss := c.evidence - c.found
					fmt.Fprintf(&sb, "%s %-8s evidence %5d found %5d missed %5d: absent %4d crowded %4d rank11-20 %4d rank21+ %4d | missed with lead-in in top10 %4d, multi-session evidence in fewer top-10 sessions %4d\n",
						name, k, c.evidence, c.found, miss, c.absent, c.crowded, c.near, c.far, c.leadIn, c.oneSession)
				}
				fmt.Print(sb.String())
			}
		})
	}
}
