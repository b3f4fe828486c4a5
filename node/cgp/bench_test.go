package cgp_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/node/cgp"
	"github.com/cmbnode/cmbnode/node/cgp/cgptest"
)

// BenchmarkQuery10k: one query through the engine (search, render, pack,
// sign) over 10,000 stored records with max_tokens 4000, reporting
// per-query latency percentiles.
func BenchmarkQuery10k(b *testing.B) {
	e, _, err := cgptest.NewEngine(10_000, 7)
	if err != nil {
		b.Fatal(err)
	}
	texts := []string{"retry policy backoff", "conformance probe", "mesh gossip latency", "incident review storage", "deploy pipeline"}
	qs := make([]*cgp.ContextQuery, len(texts))
	for i, t := range texts {
		qs[i], err = cgp.DecodeQuery([]byte(`{"goal":"` + t + `","max_frames":50,"max_tokens":4000}`))
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		res, err := e.Query(ctx, qs[i%len(qs)])
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if len(res.Frames) == 0 {
			b.Fatal("no frames")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
