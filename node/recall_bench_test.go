package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/store"
)

// BenchmarkRecall is the latency of node.Recall (the socket's recall path,
// limit 10) at 10,000 and 100,000 stored CMBs: conversation turns from the
// evaluation's generator, chained by lineage as an agent records them, so
// that every hit's thread is walked; and at 100,000 turns of the harder
// set's generator (recall_hard_test.go), which are longer and share more
// words. The store is filled through PutMany with signed records, which
// builds 100,000 in seconds; the questions are the evaluation's, cycled.
// Beside the percentiles of wall time it reports the process CPU per
// recall, which a loaded machine disturbs less.
func BenchmarkRecall(b *testing.B) {
	for _, c := range []struct {
		set  string
		size int
	}{{"", 10_000}, {"", 100_000}, {"hard/", 100_000}} {
		// Filled once, outside the measured runs: b.Run calls its
		// function again for every b.N it tries.
		ctx := context.Background()
		n := openEvalNode(b)
		var d *evalDataset
		if c.set == "hard/" {
			// ~470 turns per conversation of 19 sessions.
			d = newHardDataset(uint64(c.size), c.size/450+1, 19)
		} else {
			// ~200 turns per conversation of 12 sessions.
			var err error
			if d, err = newEvalDataset(uint64(c.size), c.size/190+1, 12); err != nil {
				b.Fatal(err)
			}
		}
		turns := d.turns[:min(len(d.turns), c.size)]
		if len(turns) < c.size {
			b.Fatalf("generated %d turns, want %d", len(turns), c.size)
		}
		if _, err := fillTurns(ctx, n, turns, true); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%scmbs=%d", c.set, c.size), func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			cpu0 := cpuTime()
			for i := range b.N {
				q := d.questions[i%len(d.questions)]
				t := time.Now()
				if _, err := n.Recall(ctx, q.text, 10); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
		n.Close()
	}
}

// fillTurns stores turns as this node's signed records, each the child
// of the previous turn of its session if chained, a thousand to a
// PutMany, and returns their keys. The text index and lineage are what
// node.Remember would build; PutMany only makes filling fast.
func fillTurns(ctx context.Context, n *Node, turns []evalTurn, chained bool) ([]string, error) {
	const batch = 1000
	base := time.Now().Add(-time.Hour).UnixMilli()
	keys := make([]string, 0, len(turns))
	items := make([]store.Item, 0, batch)
	for i, t := range turns {
		dr := cmb.Draft{Fields: evalFields(t), Group: n.group, CreatedBy: n.id.NodeID, CreatedAt: base + int64(i)}
		if chained && i > 0 && turns[i-1].session == t.session {
			dr.Parents = []string{keys[i-1]}
		}
		rec, err := cmb.Build(dr, n.id.Ed25519)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", i, err)
		}
		keys = append(keys, rec.Key)
		items = append(items, store.Item{Entry: entryOf(rec), Meta: store.Meta{Source: SourceLocal, Verified: true}})
		if len(items) == batch || i == len(turns)-1 {
			res, err := n.st.PutMany(ctx, items)
			if err != nil {
				return nil, fmt.Errorf("put: %w", err)
			}
			for _, r := range res {
				if r.Err != nil {
					return nil, fmt.Errorf("put: %w", r.Err)
				}
			}
			items = items[:0]
		}
	}
	return keys, nil
}

// BenchmarkRememberCPU is the process CPU per CMB stored through
// node.Remember (build, sign, durable put, indexing), for conversation
// turns chained by lineage, one writer waiting for each. It is the figure
// the "CPU cost of storing a CMB" is measured by.
func BenchmarkRememberCPU(b *testing.B) {
	ctx := context.Background()
	d, err := newEvalDataset(7, b.N/190+1, 12)
	if err != nil {
		b.Fatal(err)
	}
	n := openEvalNode(b)
	b.ResetTimer()
	cpu0 := cpuTime()
	prev := ""
	for i := range b.N {
		t := d.turns[i%len(d.turns)]
		in := RememberInput{Fields: evalFields(t)}
		if i > 0 && d.turns[(i-1)%len(d.turns)].session == t.session {
			in.Parents = []string{prev}
		}
		res, err := n.Remember(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		prev = res.Key
	}
	// Indexing runs after the acknowledgement: wait for it to be counted.
	if _, err := n.st.Search(ctx, "x", store.SearchOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/cmb")
}
