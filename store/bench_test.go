package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
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
// writers: each waits for its acknowledgement before the next put.
//
// The path a synchronous put waits on (writer.go): the caller encodes the
// record; the writer goroutine checks for a duplicate and adds it to the
// batch being built; the syncer writes the batch as one frame of the log
// (seglog.go) with O_DIRECT|O_DSYNC, acknowledges the callers, then gives
// badger a pointer to each record in that frame while they prepare their
// next puts. Tokenising and the in-memory indexes run after that on the
// indexer goroutine, so they cost CPU but not latency.
//
// On the 2-core VM this was tuned on (ext4 on a virtio disk, no FUA), the
// device takes ~200 µs per 16 KB O_DSYNC write and each costs ~100 µs of
// CPU; 8 writers' commits hold ~8 puts. Per put, in a CPU profile of 100k
// puts (41 µs in all, a fast moment): ~14.6 indexing (tokenising, the text
// index's delta and its merges, orders), ~6.5 the log write (a share of
// one), ~4.3 badger (its skiplist, for a pointer), ~4.9 encoding and
// submitting, ~2 writer, ~2 syncer, ~1.5 GC, the rest goroutine switches
// and wake-ups. The VM's speed moves all of it: the same binary measured
// 18-28k puts/s over a day.
//
// With records written once, CPU no longer sets the pace: with indexing
// switched off altogether (a quarter less CPU per put) 8 pairs gained 5%
// on average. The commit cycle does. Traced over 100k puts in a fast
// stretch (~280 µs per commit): ~175-210 µs of frame write (~165-200 µs
// when the VM is otherwise idle), then the acknowledged writers' next jobs
// reach the writer 20-26 µs (the first) to 67-81 µs (the last) after the
// acknowledgement. They are prepared one after another on the core that
// acknowledged them: the other core halts when idle and takes ~45 µs to
// wake. So badger gets a batch's pointers beside the next frame write, on
// a goroutine of its own (~50 µs), which then hands the batch to the
// indexer when that write returns (18 of 24 pairs faster than the syncer
// handing it over after the acknowledgement, +5%; see syncer). Applied right after the acknowledgement
// instead, the apply held that core: the first job came 53-60 µs after it
// and the last 95-105 µs (20 pairs against that: 13 faster, +2% on
// average; 1 writer +17-25%, 3 of 3 pairs; 8 x 8 in flight, where CPU
// sets the pace, -3%, 6 of 10 pairs faster). Not kept: a goroutine spinning through the frame write to
// keep the other core awake (4 of 6 pairs slower, by up to 22%, with
// 6-23 µs more CPU per put);
// two frames in flight again, at block boundaries (14k puts/s: 8 writers
// stay in one group, and each write's completion is one more wake-up);
// compressing each record (S2) before the write, for smaller frames
// (nothing gained, 4 pairs); GOMAXPROCS=1 (19k against 24k) or 4 (no
// faster, 3 pairs, 2-6 µs more CPU per put).
//
// The apply itself starts late: 46-49 µs into the frame write when the
// other core is idle (its wake-up), 66-73 µs when the indexer holds that
// core, as it does at 86-91% of writes; it ends after the write returns
// at 20-25% of commits, and the syncer then waits ~50 µs for it (12 µs
// otherwise, readying the applier). Not kept, 3 pairs each: starting the
// apply at the acknowledgement (late 1%, but writes of 216-220 µs in 2 of
// 3 runs, and 3 of 3 slower); one goroutine applying and indexing, looking
// for an apply between records (late 4-5%, but 20.1-24.4k against
// 23.8-27.3k).
//
// Where the time went before, and what was tried:
//   - Records were written twice, to the log and into badger's value log
//     (an mmap whose fresh pages fault in zero-filled, 8 MB of read-around
//     at a time, stalling puts 20-50 ms); since each is written once, in
//     the log, with badger holding pointers: ~22k -> ~27k puts/s, 20% less
//     CPU per put, no such stalls.
//   - The log grows in zero-filled 4 MB steps so that frame writes never
//     allocate (an allocating O_DSYNC write also commits the journal).
//     Steps are direct writes; filling them in the background instead
//     cost CPU and slowed the frame writes it ran beside (4 of 4 pairs
//     slower). A new segment per checkpoint (every 32 MB) means one step
//     per ~3,600 puts, each stalling the commit in flight ~5 ms.
//   - Not kept, each measured against the path of its day: two commits in
//     flight in the log at once (groups of ~4 writers taking turns:
//     16,800-20,700 against 21,900-26,200 puts/s, the extra log write per
//     put costing more than the overlap gains); a second log file so that
//     commits go on during a checkpoint (1 of 4 pairs faster); parking the
//     indexer while writers prepare; indexing during the log write; a
//     yield after each acknowledgement; the writer taking all queued jobs
//     at once (4 of 11 pairs faster); values in badger's LSM tree instead
//     of its value log (13-17k against 20-22k puts/s: compactions rewrite
//     every record).
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

func benchPut(b *testing.B, writers, inflight, batch int) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := newCorpus(1)
	entries := make([]Entry, b.N)
	for i := range entries {
		entries[i] = c.record(i, testBase+int64(i))
	}
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
