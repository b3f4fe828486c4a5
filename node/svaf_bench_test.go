package node

import (
	"context"
	"fmt"
	mrand "math/rand"
	"runtime"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/benchtext"
	"github.com/cmbnode/cmbnode/node/embed"
)

// standardFields are n standard records' fields (BenchmarkReceive's):
// seven 300-byte fields of Zipf-distributed made-up words.
func standardFields(n int) []cmb.Fields {
	r := mrand.New(mrand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	out := make([]cmb.Fields, n)
	for i := range out {
		for j := range out[i] {
			out[i][j].Text = benchtext.Field(fmt.Sprintf("%s %d:", cmb.FieldNames[j], i), 300, vocab, z)
		}
	}
	return out
}

// BenchmarkJudge is SVAF alone on a live record: the judgement of a
// standard record made just now against a memory of 3,000 standard
// records received in the minutes before, nothing stored. It is the CPU
// SVAF adds to receiving a record, without the rest of the receive path
// and its noise; it reports the process CPU per judgement.
func BenchmarkJudge(b *testing.B) { benchJudge(b, 3000, 256) }

// BenchmarkJudge20k is BenchmarkJudge at the delivery benchmark's scale:
// 20,000 records stored, and 4,096 judged in turn, more than the anchor
// cache holds, as a stream of new records meets it.
func BenchmarkJudge20k(b *testing.B) { benchJudge(b, 20000, 4096) }

func benchJudge(b *testing.B, stored, judged int) {
	ctx := context.Background()
	bob, recs := liveMemory(b, stored, judged)
	b.ReportAllocs()
	cpu0, n := cpuTime(), 0
	for ; b.Loop(); n++ {
		if _, _, err := bob.judge(ctx, recs[n%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-µs/record")
}

// standardTexts are n standard records' texts.
func standardTexts(n int) [][cmb.NumFields]string {
	fields := standardFields(n)
	recs := make([][cmb.NumFields]string, len(fields))
	for i, f := range fields {
		recs[i] = f.Texts()
	}
	return recs
}

// BenchmarkHashFields is the hashed kernel's counts of one standard
// record, as SVAF makes them for an incoming record and an uncached
// anchor.
func BenchmarkHashFields(b *testing.B) {
	recs := standardTexts(64)
	h := embed.DefaultHashed()
	sc := newHashScratch(h.Dim)
	b.ReportAllocs()
	cpu0, n := cpuTime(), 0
	for ; b.Loop(); n++ {
		hashFields(h, &recs[n%len(recs)], sc, nil)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(n), "cpu-µs/record")
}

// BenchmarkNearSignature is the near-copy signature of one standard
// record (nearcopy.go), as SVAF makes it for an incoming record.
func BenchmarkNearSignature(b *testing.B) {
	recs := standardTexts(64)
	h := embed.DefaultHashed()
	var buf []uint64
	b.ReportAllocs()
	cpu0, n := cpuTime(), 0
	for ; b.Loop(); n++ {
		_, _, buf = nearSignature(h, &recs[n%len(recs)], buf)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(n), "cpu-µs/record")
}

// BenchmarkNearAdd is adding the signatures of 20,000 standard records,
// judged just before, to a group's near-copy table, as keep does for each
// record stored: it reports the CPU and the table's heap per record.
func BenchmarkNearAdd(b *testing.B) {
	h := embed.DefaultHashed()
	sigs := standardSigs(h, 256)
	keys := make([]string, 20000)
	for i := range keys {
		keys[i] = fmt.Sprintf("cmb1-%060d", i)
	}
	fill := func() *nearIndex {
		x := &nearIndex{groups: map[string]*nearGroup{"alpha": newNearGroup()}}
		for i, k := range keys {
			s := sigs[i%len(sigs)] // made distinct in every band
			for j := 1; j < nearBins; j += nearRows {
				s[j] ^= uint32(i)
			}
			x.judgedSig(k, &s)
			x.add(h, k, "alpha", int64(i), nil)
		}
		return x
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	x := fill()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(x)
	cpu0 := cpuTime()
	for b.Loop() {
		fill()
	}
	b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/float64(len(keys)), "B/record")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(b.N*len(keys)), "cpu-µs/record")
}

// standardSigs is the near-copy signatures of n standard records.
func standardSigs(h embed.Hashed, n int) []nearSig {
	recs := standardTexts(n)
	sigs := make([]nearSig, len(recs))
	for i := range recs {
		sigs[i], _, _ = nearSignature(h, &recs[i], nil)
	}
	return sigs
}

// nearLookupTable is the near-copy lookup benchmarks' group: a table of
// 100,000 standard records made distinct in every band, and 4,096 new
// records to look up, each distinct from all stored but one in eight a
// near-copy (a bin changed) of a stored one.
func nearLookupTable() (*nearIndex, *nearGroup, []nearSig) {
	h := embed.DefaultHashed()
	sigs := standardSigs(h, 256)
	x := &nearIndex{groups: map[string]*nearGroup{"alpha": newNearGroup()}}
	g := x.groups["alpha"]
	const stored = 100_000
	for i := range stored {
		s := sigs[i%len(sigs)] // made distinct in every band
		for j := 1; j < nearBins; j += nearRows {
			s[j] ^= uint32(i)
		}
		g.addLocked(fmt.Sprintf("cmb1-%060d", i), int64(i), &s)
	}
	probes := make([]nearSig, 4096)
	for i := range probes {
		k := stored + i
		if i%8 == 0 {
			k = i * 7 % stored
		}
		s := sigs[k%len(sigs)]
		for j := 1; j < nearBins; j += nearRows {
			s[j] ^= uint32(k)
		}
		if i%8 == 0 {
			s[0]++
		}
		probes[i] = s
	}
	return x, g, probes
}

// BenchmarkNearLookup is the near-copy lookup of a new standard record in
// a group's table of 100,000 (a daemon's at the delivery benchmark's rate
// after half a minute), whose bands it mostly does not share: it reports
// the CPU per lookup.
func BenchmarkNearLookup(b *testing.B) {
	x, g, probes := nearLookupTable()
	runtime.GC() // the table made, not the lookups, is the heap to mark
	var out []nearCandidate
	b.ReportAllocs()
	cpu0, n := cpuTime(), 0
	for ; b.Loop(); n++ {
		out = x.lookup(g, &probes[n%len(probes)], out)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(n), "cpu-µs/lookup")
}

// BenchmarkNearLookupCold is BenchmarkNearLookup with 8 MB of other
// memory written between lookups, untimed, as a daemon's other work on a
// received record evicts the table from the caches.
func BenchmarkNearLookupCold(b *testing.B) {
	x, g, probes := nearLookupTable()
	other := make([]uint64, 1<<20)
	var out []nearCandidate
	runtime.GC()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		b.StopTimer()
		for i := range other {
			other[i] += uint64(n)
		}
		b.StartTimer()
		out = x.lookup(g, &probes[n%len(probes)], out)
		n++
	}
}

// BenchmarkNearAddCold is adding a judged record's signature to a group's
// table of 100,000, as keep does for a record stored, with 8 MB of other
// memory written between adds, untimed, as a daemon's other work on a
// received record evicts the table from the caches.
func BenchmarkNearAddCold(b *testing.B) {
	h := embed.DefaultHashed()
	sigs := standardSigs(h, 256)
	x := &nearIndex{groups: map[string]*nearGroup{"alpha": newNearGroup()}}
	const stored = 100_000
	key := func(i int) string { return fmt.Sprintf("cmb1-%060d", i) }
	sig := func(i int) nearSig {
		s := sigs[i%len(sigs)] // made distinct in every band
		for j := 1; j < nearBins; j += nearRows {
			s[j] ^= uint32(i)
		}
		return s
	}
	for i := range stored {
		s := sig(i)
		x.judgedSig(key(i), &s)
		x.add(h, key(i), "alpha", int64(i), nil)
	}
	other := make([]uint64, 1<<20)
	runtime.GC()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		b.StopTimer()
		for i := range other {
			other[i] += uint64(n)
		}
		s, k := sig(stored+n), key(stored+n)
		b.StartTimer()
		x.judgedSig(k, &s)
		x.add(h, k, "alpha", int64(stored+n), nil)
		n++
	}
}

// BenchmarkHashFieldsSigned is BenchmarkHashFields with the near-copy
// signature made in the same pass, as SVAF counts an incoming record.
func BenchmarkHashFieldsSigned(b *testing.B) {
	recs := standardTexts(64)
	h := embed.DefaultHashed()
	sc := newHashScratch(h.Dim)
	b.ReportAllocs()
	cpu0, n := cpuTime(), 0
	for ; b.Loop(); n++ {
		var ns nearSigner
		ns.init()
		hashFields(h, &recs[n%len(recs)], sc, &ns)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(n), "cpu-µs/record")
}
