package store

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Records for the index benchmarks, generated once per test binary: making
// a record (JSON, SHA-256) costs more than indexing it.
var (
	speedOnce sync.Once
	speedPre  []Entry // the 100,000 documents indexed before timing
	speedAdd  []Entry // the documents whose addition is timed
)

const (
	speedPreN = 100_000
	speedAddN = 20_000
)

func speedCorpus() ([]Entry, []Entry) {
	speedOnce.Do(func() {
		c := newCorpus(1)
		all := make([]Entry, speedPreN+speedAddN)
		for i := range all {
			e := c.record(i, testBase+int64(i)*1000)
			e.Raw = nil
			all[i] = e
		}
		speedPre, speedAdd = all[:speedPreN], all[speedPreN:]
	})
	return speedPre, speedAdd
}

// BenchmarkAnalyze is the cost of tokenising one ~1 KB record's seven
// fields into its index terms.
func BenchmarkAnalyze(b *testing.B) {
	_, add := speedCorpus()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_ = analyze(add[i%len(add)].Texts)
	}
}

// BenchmarkIndexAdd is the cost of adding one analysed record to a text
// index that already holds 100,000 of them. Past the prepared records the
// same texts come back under new keys, so the index keeps growing as it
// would; the terms are analysed outside the timed loop.
func BenchmarkIndexAdd(b *testing.B) {
	pre, add := speedCorpus()
	x := newTextIndex()
	for _, e := range pre {
		x.addLocked(e.Key, e.CreatedAt, e.Group, analyze(e.Texts))
	}
	terms := make([]docTerms, len(add))
	for i, e := range add {
		terms[i] = analyze(e.Texts)
	}
	keys := make([]string, b.N)
	for i := range keys {
		if i < len(add) {
			keys[i] = add[i].Key
		} else {
			keys[i] = fmt.Sprintf("%s-%d", add[i%len(add)].Key, i)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		e := &add[i%len(add)]
		x.addLocked(keys[i], e.CreatedAt, e.Group, terms[i%len(add)])
	}
}

// BenchmarkIndexAddCold is BenchmarkIndexAdd with the caches disturbed
// between documents (by an untimed pass over 8 MB, which empties L1 and L2
// and much of L3), as in the write path where badger runs between index
// additions. Its ns/add metric is the time spent in addLocked alone.
func BenchmarkIndexAddCold(b *testing.B) {
	pre, add := speedCorpus()
	x := newTextIndex()
	for _, e := range pre {
		x.addLocked(e.Key, e.CreatedAt, e.Group, analyze(e.Texts))
	}
	terms := make([]docTerms, len(add))
	for i, e := range add {
		terms[i] = analyze(e.Texts)
	}
	keys := make([]string, b.N)
	for i := range keys {
		if i < len(add) {
			keys[i] = add[i].Key
		} else {
			keys[i] = fmt.Sprintf("%s-%d", add[i%len(add)].Key, i)
		}
	}
	junk := make([]uint64, 1<<20) // 8 MB
	var sink uint64
	var spent time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := 0; j < len(junk); j += 8 {
			junk[j]++
			sink += junk[j]
		}
		e := &add[i%len(add)]
		t := time.Now()
		x.addLocked(keys[i], e.CreatedAt, e.Group, terms[i%len(add)])
		spent += time.Since(t)
	}
	b.StopTimer()
	if sink == 1 {
		b.Log(sink)
	}
	b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "ns/add")
}
