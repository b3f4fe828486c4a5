package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// corpus generates deterministic ~1 KB records whose texts follow a Zipf
// distribution over a synthetic vocabulary, so posting lists range from a
// handful of documents to most of them, as in real text.
type corpus struct {
	vocab []string
	rng   *rand.Rand
	zipf  *rand.Zipf
}

func newCorpus(seed uint64) *corpus {
	rng := rand.New(rand.NewPCG(seed, 7))
	c := &corpus{rng: rng, zipf: rand.NewZipf(rng, 1.1, 2, 19999)}
	syll := []string{"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "qua", "sh", "th", "el", "an", "or"}
	for i := range 20000 {
		var b strings.Builder
		n := i
		for j := 0; j < 2 || n > 0; j++ {
			b.WriteString(syll[n%len(syll)])
			n /= len(syll)
		}
		c.vocab = append(c.vocab, b.String())
	}
	return c
}

func (c *corpus) words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = c.vocab[c.zipf.Uint64()]
	}
	return strings.Join(w, " ")
}

// record builds an entry whose Raw is a ~1 KB signed-record-like JSON.
func (c *corpus) record(i int, at int64) Entry {
	var e Entry
	for f := range e.Texts {
		e.Texts[f] = c.words(8 + c.rng.IntN(10))
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "bench-%d-%d", i, c.rng.Uint64()))
	e.Key = "cmb1-" + hex.EncodeToString(sum[:])
	e.CreatedBy = fmt.Sprintf("0190c2d4-%04x-7000-8000-%012x", i%8, i%8)
	e.CreatedAt = at
	e.Group = "bench"
	fields := map[string]any{}
	names := FieldNames()
	for f, t := range e.Texts {
		fields[names[f]] = map[string]string{"text": t}
	}
	sig := make([]byte, 64)
	for j := range sig {
		sig[j] = byte(c.rng.Uint32())
	}
	raw, _ := json.Marshal(map[string]any{
		"key": e.Key, "createdBy": e.CreatedBy, "createdAt": at, "group": e.Group,
		"fields": fields, "sig": base64.RawURLEncoding.EncodeToString(sig), "sigAlg": "ed25519",
	})
	// Pad or trim the last text so every record is close to 1 KB on the wire.
	for len(raw) < 1000 {
		e.Texts[6] += " " + c.words(1)
		fields["mood"] = map[string]string{"text": e.Texts[6]}
		raw, _ = json.Marshal(map[string]any{
			"key": e.Key, "createdBy": e.CreatedBy, "createdAt": at, "group": e.Group,
			"fields": fields, "sig": base64.RawURLEncoding.EncodeToString(sig), "sigAlg": "ed25519",
		})
	}
	e.Raw = raw
	return e
}

// BenchmarkPut1KB measures durable puts of ~1 KB records by synchronous
// writers: each waits for its acknowledgement before the next put. Such a
// put waits on the commit cycle (writer.go): its batch's frame written
// durably to the log, then the acknowledged writers' next jobs reaching
// the writer. Badger's apply and the indexes run off that path (beside the
// next frame write, and on the indexer), so they cost CPU, reported beside
// the rate, but not latency. docs/store.md has the figures measured with it.
func BenchmarkPut1KB(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { benchPut(b, writers, 1, 1) })
	}
}

// BenchmarkPut1KBPipelined measures the same durable puts when each of 8
// writers keeps several in flight, as the mesh receiver (one Put per
// validated record, thousands of validations in flight) and busy agents do:
// inflight=8 is 8 concurrent Put calls per writer, batch=16 is PutMany of 16.
func BenchmarkPut1KBPipelined(b *testing.B) {
	b.Run("writers=8/inflight=8", func(b *testing.B) { benchPut(b, 8, 8, 1) })
	b.Run("writers=8/batch=16", func(b *testing.B) { benchPut(b, 8, 1, 16) })
}

// benchEntries opens a store for a benchmark, closed when it ends, and
// makes b.N records of the corpus seeded with seed.
func benchEntries(b *testing.B, seed uint64) (*Store, []Entry) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	c := newCorpus(seed)
	entries := make([]Entry, b.N)
	for i := range entries {
		entries[i] = c.record(i, testBase+int64(i))
	}
	return s, entries
}

func benchPut(b *testing.B, writers, inflight, batch int) {
	s, entries := benchEntries(b, 1)
	var next atomic.Int64
	ctx := context.Background()
	b.SetBytes(int64(len(entries[0].Raw)))
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	var wg sync.WaitGroup
	// Latency of each Put (batch 1): a checkpoint stalls the commits that
	// arrive while it runs, which shows in the maximum.
	lats := make([][]time.Duration, writers*inflight)
	for w := range writers * inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := make([]Item, 0, batch)
			for {
				i := int(next.Add(int64(batch))) - batch
				if i >= len(entries) {
					return
				}
				if batch == 1 {
					t := time.Now()
					if _, _, err := s.Put(ctx, entries[i], Meta{}); err != nil {
						b.Error(err)
						return
					}
					lats[w] = append(lats[w], time.Since(t))
					continue
				}
				items = items[:0]
				for _, e := range entries[i:min(i+batch, len(entries))] {
					items = append(items, Item{Entry: e})
				}
				res, err := s.PutMany(ctx, items)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
						}
					}
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/put")
	st, _ := s.Stats(ctx)
	b.ReportMetric(float64(st.CommittedJobs)/float64(max(st.Commits, 1)), "puts/commit")
	if batch == 1 {
		all := slices.Concat(lats...)
		reportPercentiles(b, all)
		b.ReportMetric(float64(slices.Max(all).Microseconds()), "max-µs")
	}
}

// BenchmarkStore100k loads 100,000 1 KB records, then measures disk use per
// record, reopen time (which rebuilds the text index), and get and search
// latency percentiles.
func BenchmarkStore100k(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := newCorpus(2)
	keys := make([]string, 0, n)
	var rawBytes int64
	for start := 0; start < n; start += 1000 {
		items := make([]Item, 0, 1000)
		for i := start; i < start+1000; i++ {
			e := c.record(i, testBase+int64(i)*1000)
			keys = append(keys, e.Key)
			rawBytes += int64(len(e.Raw))
			items = append(items, Item{Entry: e})
		}
		if _, err := s.PutMany(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	disk, err := DirDiskBytes(dir)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	s, err = Open(dir, Options{Now: func() time.Time { return time.UnixMilli(testBase + n*1000) }})
	if err != nil {
		b.Fatal(err)
	}
	openMs := float64(time.Since(t0).Microseconds()) / 1000
	defer s.Close()
	b.Logf("%d records, %.0f raw bytes/record, %d bytes on disk, reopen %.0f ms", n, float64(rawBytes)/n, disk, openMs)

	b.Run("disk", func(b *testing.B) {
		for range b.N {
		}
		b.ReportMetric(float64(disk)/n, "disk-B/record")
		b.ReportMetric(float64(rawBytes)/n, "raw-B/record")
		b.ReportMetric(openMs, "reopen-ms")
	})
	b.Run("get", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(3, 3))
		lat := make([]time.Duration, 0, b.N)
		for range b.N {
			k := keys[rng.IntN(len(keys))]
			t := time.Now()
			if _, err := s.Get(ctx, k); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		reportPercentiles(b, lat)
	})
	b.Run("search", func(b *testing.B) {
		qc := newCorpus(4)
		opts := SearchOptions{Limit: 10, RecencyWeight: 0.5}
		lat := make([]time.Duration, 0, b.N)
		for range b.N {
			q := qc.words(2 + qc.rng.IntN(3))
			t := time.Now()
			if _, err := s.Search(ctx, q, opts); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		reportPercentiles(b, lat)
	})
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkPutPaced models the store's share of the mesh receive path: a
// record arrives every millisecond (the two-daemon delivery benchmark's
// 1,000/s), each on a goroutine of its own as GossipSub's validators run,
// which first reads what is stored (a Get of the record before it and a
// one-word search, as SVAF's judgement reads: both wait for the earlier record's
// apply and indexing) and then puts it durably. At that rate most batches
// hold one record, so the CPU per put is mostly the commit cycle's
// goroutine hand-offs; it reports that and the process's context switches
// per put, which the hand-offs cause on idle cores.
func BenchmarkPutPaced(b *testing.B) {
	s, entries := benchEntries(b, 3)
	ctx := context.Background()
	// A one-word search waits for the index as any does, at little cost.
	word, _, _ := strings.Cut(entries[0].Texts[0], " ")
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0, sw0 := cpuTime(), ctxSwitches()
	for i := range entries {
		<-tick.C
		wg.Go(func() {
			if i > 0 {
				// The record before may still be on its way.
				if _, err := s.GetLineage(ctx, entries[i-1].Key); err != nil && !errors.Is(err, ErrNotFound) {
					b.Error(err)
					return
				}
			}
			if _, err := s.Search(ctx, word, SearchOptions{Limit: 4}); err != nil {
				b.Error(err)
				return
			}
			if _, _, err := s.Put(ctx, entries[i], Meta{}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/put")
	b.ReportMetric(float64(ctxSwitches()-sw0)/float64(b.N), "switches/put")
	b.ReportMetric(0, "ns/op")
}

// ctxSwitches is the process's context switches so far, voluntary and not.
func ctxSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}
