package ipc

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
)

// BenchmarkRememberRoundTrip is one client remembering in a loop: the
// latency an agent sees, durability (an fsync'd commit) included.
func BenchmarkRememberRoundTrip(b *testing.B) {
	ts := startServer(b, nil)
	c := dialClient(b, ts.path)
	ctx := ctxT(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	u0 := usage(b)
	for i := range b.N {
		t0 := time.Now()
		if _, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprint("round trip ", i)}}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	u1 := usage(b)
	b.ReportMetric(float64((u1.cpu-u0.cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(u1.switches-u0.switches)/float64(b.N), "switches/op")
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// rusage is the process's CPU time (user and system) and context
// switches (voluntary and not) so far: client and server together, which
// is what a paired comparison of the server's changes needs.
type rusage struct {
	cpu      time.Duration
	switches int64
}

func usage(b *testing.B) rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return rusage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), switches: int64(ru.Nvcsw + ru.Nivcsw)}
}

// BenchmarkRememberSustained is sixteen clients remembering at once, each
// on its own connection: the rate the node sustains when commits are shared.
func BenchmarkRememberSustained(b *testing.B) {
	ts := startServer(b, nil)
	ctx := ctxT(b)
	var seq atomic.Int64
	b.SetParallelism(8) // 8 × GOMAXPROCS clients
	t0 := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := Dial(ctx, ts.path)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		for pb.Next() {
			if _, err := c.Remember(ctx, RememberArgs{Fields: map[string]any{"focus": fmt.Sprint("sustained ", seq.Add(1))}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "remembers/s")
}

// BenchmarkDecodeStandardRemember is the reader's work on one standard
// remember request (seven 300-byte fields of Zipf-drawn words, as the
// delivery benchmark sends) before its handler runs: decoding the line,
// the text check and reading the fields.
func BenchmarkDecodeStandardRemember(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := rand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	fields := map[string]any{}
	for _, name := range cmb.FieldNames {
		fields[name] = map[string]string{"text": benchtext.Field(name+" 1:", 300, vocab, z)}
	}
	line, err := json.Marshal(map[string]any{"type": "remember", "id": 1, "fields": fields})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := decodeMessage(line)
		if err != nil {
			b.Fatal(err)
		}
		if member, _ := badTextRaw(line, m); member != "" {
			b.Fatal(member)
		}
		if _, err := decodeRemember(m); err != nil {
			b.Fatal(err)
		}
	}
}
