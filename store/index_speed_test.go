package store

import (
	"fmt"
	"maps"
	"math"
	mrand "math/rand"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cmbnode/cmbnode/internal/benchtext"
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
	c := newCorpus(3)
	texts := make([][NumFields]string, 5000)
	for i := range texts {
		texts[i] = c.record(i, testBase).Texts
	}
	// A store's termer, its stem cache warm as it is past the first records.
	var tm termer
	benchThreadCPU(b, func(i int) { _ = analyze(&tm, texts[i%len(texts)]) })
}

// benchThreadCPU runs op(i) for i < b.N on one thread and reports the
// thread's CPU time per op, which unlike the wall time leaves out what
// other processes on the machine take.
func benchThreadCPU(b *testing.B, op func(i int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := threadCPU()
	for i := range b.N {
		op(i)
	}
	b.ReportMetric(float64(threadCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// indexAddSetup builds an index of 100,000 records and, for n additions,
// the records to add (cycled), their analysed terms and fresh keys.
func indexAddSetup(n int) (x *textIndex, add []Entry, terms []docTerms, keys []string) {
	pre, add := speedCorpus()
	x = newTextIndex(nil)
	for _, e := range pre {
		x.addLocked(e.Key, e.CreatedAt, e.Group, x.analyze(e.Texts))
	}
	terms = make([]docTerms, len(add))
	for i, e := range add {
		terms[i] = x.analyze(e.Texts)
	}
	keys = make([]string, n)
	for i := range keys {
		if i < len(add) {
			keys[i] = add[i].Key
		} else {
			keys[i] = fmt.Sprintf("%s-%d", add[i%len(add)].Key, i)
		}
	}
	return x, add, terms, keys
}

// BenchmarkIndexAdd is the cost of adding one analysed record to a text
// index that already holds 100,000 of them. Past the prepared records the
// same texts come back under new keys, so the index keeps growing as it
// would; the terms are analysed outside the timed loop.
func BenchmarkIndexAdd(b *testing.B) {
	x, add, terms, keys := indexAddSetup(b.N)
	benchThreadCPU(b, func(i int) {
		e := &add[i%len(add)]
		x.addLocked(keys[i], e.CreatedAt, e.Group, terms[i%len(add)])
	})
}

// BenchmarkIndexRecord is the whole cost of indexing one record's texts
// into an index of 100,000: tokenising and adding, as analyze then add, and
// as addTexts (the put and start-up path), which tokenises straight into
// the delta.
func BenchmarkIndexRecord(b *testing.B) {
	for _, viaTokens := range []bool{false, true} {
		name := "analyze+add"
		if viaTokens {
			name = "addTexts"
		}
		b.Run(name, func(b *testing.B) {
			pre, add := speedCorpus()
			x := newTextIndex(nil)
			for _, e := range pre {
				x.addTexts(e.Key, e.CreatedAt, e.Group, e.Texts)
			}
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("%s-%d", add[i%len(add)].Key, i)
			}
			benchThreadCPU(b, func(i int) {
				e := &add[i%len(add)]
				if viaTokens {
					x.addTexts(keys[i], e.CreatedAt, e.Group, e.Texts)
				} else {
					x.add(keys[i], e.CreatedAt, e.Group, x.analyze(e.Texts))
				}
			})
		})
	}
}

// BenchmarkIndexStandardCMB is addTexts of the delivery benchmark's
// standard CMB (seven 300-byte fields of words of a 4,096-word vocabulary
// drawn by Zipf's law, each headed by its name and the record's number)
// into an index of 20,000 of them: the indexing a remembered CMB costs.
func BenchmarkIndexStandardCMB(b *testing.B) {
	x, texts, keys := standardIndexSetup(b.N)
	benchThreadCPU(b, func(i int) { x.addTexts(keys[i], int64(i), "g", texts[i%len(texts)]) })
}

// BenchmarkIndexStandardCMBCold is BenchmarkIndexStandardCMB with the
// caches disturbed between records (an untimed pass over 8 MB), as in a
// daemon, whose indexer runs after badger and the log between records;
// cpu-ns/add is the thread's CPU in addTexts alone. It comes near what a
// sender's profile gives the text index per CMB.
func BenchmarkIndexStandardCMBCold(b *testing.B) {
	x, texts, keys := standardIndexSetup(b.N)
	benchOpsCPU(b, "cpu-ns/add", true, func(i int) { x.addTexts(keys[i], int64(i), "g", texts[i%len(texts)]) })
}

// BenchmarkIndexStandardCMBFresh is BenchmarkIndexStandardCMB with each
// added record headed by a number of its own, as the delivery benchmark's
// records are ("what 12345 of 1764633600000:"), and most records in a
// store: a word the stem cache has not seen, in every record.
func BenchmarkIndexStandardCMBFresh(b *testing.B) {
	x, texts, keys := standardIndexSetup(b.N)
	names := FieldNames()
	fresh := make([][NumFields]string, b.N)
	for i := range fresh {
		for f, t := range texts[i%len(texts)] {
			// The head standardIndexSetup gave it, its number made unique.
			_, rest, _ := strings.Cut(t, ":")
			fresh[i][f] = fmt.Sprintf("%s %d of 1764633600000:%s", names[f], 100_000+i, rest)
		}
	}
	benchThreadCPU(b, func(i int) { x.addTexts(keys[i], int64(i), "g", fresh[i]) })
}

// benchOpsCPU runs op(i) for i < b.N on one thread, if cold each after an
// untimed pass over 8 MB that empties the caches, and reports the thread's
// CPU time per op in op alone as metric, and its median over the ops as
// metric-p50: on a machine shared with other work, an op the scheduler
// cuts into pays for caches refilled, which the mean takes in and the
// median mostly does not.
func benchOpsCPU(b *testing.B, metric string, cold bool, op func(i int)) {
	junk := make([]uint64, 1<<20)
	var sink uint64
	var spent time.Duration
	each := make([]time.Duration, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := 0; cold && j < len(junk); j += 8 {
			junk[j]++
			sink += junk[j]
		}
		t := threadCPU()
		op(i)
		each[i] = threadCPU() - t
		spent += each[i]
	}
	b.StopTimer()
	if sink == 1 {
		b.Log(sink)
	}
	slices.Sort(each)
	b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), metric)
	b.ReportMetric(float64(each[b.N/2].Nanoseconds()), metric+"-p50")
}

// standardIndexSetup is an index of 20,000 standard CMBs, 5,000 distinct
// texts to add and n fresh keys.
func standardIndexSetup(n int) (x *textIndex, texts [][NumFields]string, keys []string) {
	r := mrand.New(mrand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	names := FieldNames()
	texts = make([][NumFields]string, 5_000)
	for i := range texts {
		for f := range texts[i] {
			texts[i][f] = benchtext.Field(fmt.Sprintf("%s %d of 1764633600000:", names[f], i), 300, vocab, z)
		}
	}
	x = newTextIndex(nil)
	for i := range 20_000 {
		x.addTexts(fmt.Sprintf("pre-%d", i), int64(i), "g", texts[i%len(texts)])
	}
	keys = make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("add-%d", i)
	}
	return x, texts, keys
}

// BenchmarkIndexAddCold is BenchmarkIndexAdd with the caches disturbed
// between documents (by an untimed pass over 8 MB, which empties L1 and L2
// and much of L3), as in the write path where badger runs between index
// additions. Its ns/add metric is the time spent in addLocked alone.
func BenchmarkIndexAddCold(b *testing.B) {
	x, add, terms, keys := indexAddSetup(b.N)
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

// analyzeRef is analyze as it was before it grouped terms: per field, the
// field's distinct terms in order of first occurrence, segmented by the
// segmenter alone (no ASCII fast path) and stemmed without a cache.
func analyzeRef(texts [NumFields]string) docTerms {
	var d docTerms
	var tf []int
	for f, t := range texts {
		if t == neutralText {
			continue
		}
		first := len(d.terms)
	next:
		for _, tok := range (*termer)(nil).terms(tokenizeRef(t)) {
			d.lens[f]++
			for i := first; i < len(d.terms); i++ {
				if d.terms[i].term == tok {
					tf[i]++
					continue next
				}
			}
			d.terms = append(d.terms, fieldTerm{term: tok, field: uint8(f)})
			tf = append(tf, 1)
		}
	}
	for i := range d.terms {
		d.terms[i].tf = uint16(min(tf[i], math.MaxUint16))
	}
	return d
}

// sameAnalysis reports how got differs from analyzeRef's want: the same
// lengths and (term, field, tf) entries, with a term's fields adjacent and
// ascending.
func sameAnalysis(got, want docTerms) error {
	if got.lens != want.lens {
		return fmt.Errorf("lens %v, want %v", got.lens, want.lens)
	}
	key := func(ft fieldTerm) string { return fmt.Sprintf("%q/%d/%d", ft.term, ft.field, ft.tf) }
	var g, w []string
	for _, ft := range got.terms {
		g = append(g, key(ft))
	}
	for _, ft := range want.terms {
		w = append(w, key(ft))
	}
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		return fmt.Errorf("terms %v, want %v", g, w)
	}
	done := map[string]bool{}
	for i, ft := range got.terms {
		if i > 0 && got.terms[i-1].term == ft.term {
			if got.terms[i-1].field >= ft.field {
				return fmt.Errorf("fields of %q out of order: %v", ft.term, got.terms)
			}
			continue
		}
		if done[ft.term] {
			return fmt.Errorf("fields of %q not adjacent: %v", ft.term, got.terms)
		}
		done[ft.term] = true
	}
	return nil
}

func TestAnalyzeSaturatesTF(t *testing.T) {
	var texts [NumFields]string
	texts[3] = strings.Repeat("x ", 70000) + "y"
	d := analyze(nil, texts)
	if len(d.terms) != 2 || d.terms[0].tf != math.MaxUint16 || d.terms[1].tf != 1 || d.lens[3] != 70001 {
		t.Fatalf("lens %v, terms %+v", d.lens, d.terms)
	}
}

func TestAnalyzeMatchesReference(t *testing.T) {
	// One termer throughout, so that cached stems are checked against
	// analyzeRef's uncached ones.
	var tm termer
	c := newCorpus(11)
	for i := range 2000 {
		e := c.record(i, testBase)
		if i%5 == 0 {
			e.Texts[i%NumFields] = neutralText
		}
		if err := sameAnalysis(analyze(&tm, e.Texts), analyzeRef(e.Texts)); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	// Short texts over a small alphabet repeat terms within and across
	// fields; long ones grow the analyzer's table.
	pieces := []string{"a", "b", "Ab", "7", "_", " ", "'", ".", ":", ",", ";", "-", "é", "É", "ß", "東", "\u200d", "’", "3,4", "A.B", "\t", "neutral"}
	rng := rand.New(rand.NewPCG(6, 6))
	for i := range 20000 {
		var texts [NumFields]string
		for f := range texts {
			n := rng.IntN(12)
			if i%200 == 0 {
				n = 400
			}
			var b strings.Builder
			for range n {
				b.WriteString(pieces[rng.IntN(len(pieces))])
				if i%200 == 0 {
					b.WriteString(strconv.Itoa(rng.IntN(1000)))
					b.WriteByte(' ')
				}
			}
			texts[f] = b.String()
			if rng.IntN(20) == 0 {
				texts[f] = neutralText
			}
		}
		if err := sameAnalysis(analyze(&tm, texts), analyzeRef(texts)); err != nil {
			t.Fatalf("%q: %v", texts, err)
		}
	}
}

// TestTermerCacheMatchesStemmer runs words through one termer past two
// generations of its cache, and words that differ only between their first
// and last eight bytes, and holds every term and its hash to the uncached stemmer's.
func TestTermerCacheMatchesStemmer(t *testing.T) {
	var tm termer
	rng := rand.New(rand.NewPCG(3, 9))
	suffixes := []string{"", "s", "ing", "ed", "'s", "ly", "ness", "ation"}
	word := func() string {
		switch rng.IntN(4) {
		case 0: // a stop word or a common word, back in every generation
			return []string{"the", "it's", "running", "was", "releases", "a"}[rng.IntN(6)]
		case 1: // long words alike in their first and last eight bytes
			return "abcdefgh" + strconv.Itoa(rng.IntN(50)) + suffixes[rng.IntN(len(suffixes))] + "stuvwxyz"
		default: // a vocabulary larger than two generations
			return "w" + strconv.Itoa(rng.IntN(3*termCacheSize)) + suffixes[rng.IntN(len(suffixes))]
		}
	}
	words := make([]string, 64)
	for round := range 8 * termCacheSize / len(words) {
		for i := range words {
			words[i] = word()
		}
		want := (*termer)(nil).terms(slices.Clone(words))
		got := tm.terms(slices.Clone(words))
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %q gave %q, want %q", round, words, got, want)
		}
	}
	for _, c := range []*stemCache{&tm.cur, &tm.old} {
		for _, e := range c.ents {
			if e.wlen != 0 && e.stem != "" && e.shash != termHash(e.stem) {
				t.Fatalf("word %q: hash of %q is %x, want %x", e.word, e.stem, e.shash, termHash(e.stem))
			}
		}
	}
	if n := tm.cur.n + tm.old.n; n > 2*termCacheSize {
		t.Fatalf("the cache holds %d words, over its bound of %d", n, 2*termCacheSize)
	}
}

// TestHeadOf holds headOf's loads to the bytes, one by one, of words of
// every length around its cases.
func TestHeadOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 24 {
		for range 50 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(1 + rng.IntN(255))
			}
			var want wordHead
			for i, c := range b {
				if i < 8 {
					want.first |= uint64(c) << (8 * i)
				}
				if n >= 8 && i >= n-8 {
					want.last |= uint64(c) << (8 * (i - (n - 8)))
				}
			}
			if got := headOf(string(b)); got != want {
				t.Fatalf("headOf(%x) = %x, want %x", b, got, want)
			}
		}
	}
}

// TestAddTextsAcrossStemGenerations adds records of a vocabulary larger
// than two generations of the stem cache through addTexts, whose words
// find their delta terms through the cache, and holds the index to one
// built through analyze and add: words move between generations and
// leave them, and the delta is merged between, so entries carry delta
// terms of generations long gone.
func TestAddTextsAcrossStemGenerations(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	suffixes := []string{"", "s", "ing", "ed", "'s"}
	x, y := newTextIndex(nil), newTextIndex(nil)
	var b strings.Builder
	for i := range 400 {
		var texts [NumFields]string
		for f := range texts {
			b.Reset()
			for range 60 {
				switch rng.IntN(3) {
				case 0: // back in every generation, and in the same field
					b.WriteString([]string{"the", "running", "runs", "release", "releases", "Melanie's"}[rng.IntN(6)])
				default:
					b.WriteString("w" + strconv.Itoa(rng.IntN(3*termCacheSize)) + suffixes[rng.IntN(len(suffixes))])
				}
				b.WriteByte(' ')
			}
			texts[f] = b.String()
		}
		key := fmt.Sprintf("r%d", i)
		x.addTexts(key, int64(i), "g", texts)
		x.addTexts(key, int64(i), "g", texts) // a duplicate adds nothing
		y.add(key, int64(i), "g", y.analyze(texts))
	}
	if x.termer.cur.n+x.termer.old.n < termCacheSize || x.delta.gen < 2 {
		t.Fatalf("%d words cached, %d merges: the test no longer crosses generations", x.termer.cur.n+x.termer.old.n, x.delta.gen)
	}
	xd, xp := x.snapshot()
	yd, yp := y.snapshot()
	if !maps.Equal(xd, yd) {
		t.Fatalf("documents differ")
	}
	if len(xp) != len(yp) {
		t.Fatalf("%d terms, want %d", len(xp), len(yp))
	}
	for term, want := range yp {
		if got := xp[term]; !maps.Equal(got, want) {
			t.Fatalf("term %q: postings %v, want %v", term, got, want)
		}
	}
}

// TestFoldNFCASCII checks fold's eight-bytes-at-a-time scan against a
// byte-by-byte lowering, with at most one byte that decides the outcome at
// every position.
func TestFoldNFCASCII(t *testing.T) {
	lower := func(s string) string {
		return strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, s)
	}
	rng := rand.New(rand.NewPCG(8, 8))
	for range 50000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			for b[i] = byte(rng.IntN(128)); 'A' <= b[i] && b[i] <= 'Z'; b[i] = byte(rng.IntN(128)) {
			}
		}
		if len(b) > 0 && rng.IntN(2) == 0 {
			b[rng.IntN(len(b))] = byte('A' - 1 + rng.IntN(28)) // '@', 'A'..'Z', '['
		}
		in := string(b)
		if got, ascii := fold(in); got != lower(in) || !ascii {
			t.Fatalf("fold(%q) = %q, %t, want %q, true", in, got, ascii, lower(in))
		}
		// One non-ASCII rune anywhere takes the Unicode path.
		i := rng.IntN(len(b) + 1)
		in = string(b[:i]) + "É" + string(b[i:])
		if got, ascii := fold(in); got != lower(string(b[:i]))+"é"+lower(string(b[i:])) || ascii {
			t.Fatalf("fold(%q) = %q, %t, want %q, false", in, got, ascii, lower(string(b[:i]))+"é"+lower(string(b[i:])))
		}
	}
}

// postingsOf is the posting list and document frequencies of term t.
func (x *textIndex) postingsOf(t string) (post []uint64, df [NumFields]int32, ok bool) {
	x.mergeLocked()
	pl := x.terms.get(t, termHash(t))
	if pl == nil {
		return nil, df, false
	}
	for _, b := range x.terms.appendSegs(nil, pl) {
		if len(b) == 0 {
			panic(fmt.Sprintf("term %q: an empty block", t))
		}
		post = append(post, b...)
	}
	return post, pl.df, true
}

// TestIndexMatchesReference builds an index from records, purges some and
// adds more, and compares every posting list, in order, and every document
// frequency with a plain reference built from analyzeRef.
func TestIndexMatchesReference(t *testing.T) {
	t.Run("analyze", func(t *testing.T) { testIndexMatchesReference(t, func(int) bool { return false }, 0, false) })
	t.Run("tokens", func(t *testing.T) { testIndexMatchesReference(t, func(int) bool { return true }, 0, false) })
	// Both kinds of addition share one delta.
	t.Run("mixed", func(t *testing.T) { testIndexMatchesReference(t, func(n int) bool { return n%3 != 0 }, 0, false) })
	// Lists of many small blocks, which a purge filters block by block.
	t.Run("blocks", func(t *testing.T) { testIndexMatchesReference(t, func(n int) bool { return n%3 != 0 }, 3, false) })
	// The delta's generations wrap, as if after 2³² merges, where the stem
	// cache's delta terms of the first generations must be let go.
	t.Run("generations wrap", func(t *testing.T) { testIndexMatchesReference(t, func(int) bool { return true }, 0, true) })
}

// testIndexMatchesReference adds record n through addTexts, which
// tokenises straight into the delta, if viaTokens(n), else through analyze
// and add; blockLen, if set, is the index's block size; if wrap, the
// delta's generations start again from the first once the first records
// are in.
func testIndexMatchesReference(t *testing.T, viaTokens func(n int) bool, blockLen int, wrap bool) {
	type refList struct {
		post []uint64
		df   [NumFields]int32
	}
	x := newTextIndex(nil)
	x.terms.blockLen = blockLen
	ref := map[string]*refList{}
	var ids []string // reference document ids, as the index assigns them
	c := newCorpus(12)
	var entries []Entry
	add := func(e Entry) {
		if viaTokens(len(ids)) {
			x.addTexts(e.Key, e.CreatedAt, e.Group, e.Texts)
		} else {
			x.add(e.Key, e.CreatedAt, e.Group, x.analyze(e.Texts))
		}
		id := uint32(len(ids))
		ids = append(ids, e.Key)
		d := analyzeRef(e.Texts)
		for _, ft := range d.terms {
			r := ref[ft.term]
			if r == nil {
				r = &refList{}
				ref[ft.term] = r
			}
			r.post = append(r.post, packPosting(id, ft.field, uint32(ft.tf), d.lens[ft.field]))
			r.df[ft.field]++
		}
	}
	check := func(when string) {
		t.Helper()
		if n := x.termCount(); n != len(ref) {
			t.Fatalf("%s: %d terms, reference %d", when, n, len(ref))
		}
		for term, r := range ref {
			post, df, ok := x.postingsOf(term)
			if !ok || df != r.df || !slices.Equal(post, r.post) {
				t.Fatalf("%s: term %q: df %v postings %x, reference df %v postings %x", when, term, df, post, r.df, r.post)
			}
		}
	}
	for i := range 3000 {
		e := c.record(i, testBase+int64(i))
		if i%7 == 0 {
			e.Texts[i%NumFields] = neutralText
		}
		if i%11 == 0 {
			e.Texts[2] = "Héllo WORLD, can't 3.14 東京 " + e.Texts[2] + " " + e.Texts[0]
		}
		entries = append(entries, e)
		add(e)
	}
	check("after adding")
	if wrap {
		// Merged by check: the next merge is the last before the wrap.
		x.delta.gen = math.MaxUint32 - 1
	}
	// A few more whose postings are still in the delta when the purge runs.
	for i := 3000; i < 3050; i++ {
		e := c.record(i, testBase+int64(i))
		entries = append(entries, e)
		add(e)
	}

	// Purge two thirds; the index compacts, renumbering documents.
	var keys []string
	var dts []docTerms
	gone := map[string]bool{}
	for i, e := range entries {
		if i%3 != 0 {
			keys = append(keys, e.Key)
			dts = append(dts, x.analyze(e.Texts))
			gone[e.Key] = true
		}
	}
	x.remove(keys, dts)
	renum := map[uint32]uint32{}
	var kept []string
	for id, k := range ids {
		if !gone[k] {
			renum[uint32(id)] = uint32(len(kept))
			kept = append(kept, k)
		}
	}
	ids = kept
	for term, r := range ref {
		var post []uint64
		var df [NumFields]int32
		for _, p := range r.post {
			if n, ok := renum[uint32(p>>32)]; ok {
				post = append(post, uint64(n)<<32|p&(1<<32-1))
				df[(p>>29)&7]++
			}
		}
		if len(post) == 0 {
			delete(ref, term)
			continue
		}
		r.post, r.df = post, df
	}
	if len(x.docs) != len(ids) {
		t.Fatalf("%d document slots after compaction, want %d", len(x.docs), len(ids))
	}
	check("after purging")
	for i := 3050; i < 4000; i++ {
		add(c.record(i, testBase+int64(i)))
	}
	check("after adding again")
	for i, k := range ids {
		if _, ok := x.byKey[k]; !ok || x.docs[i].key != k {
			t.Fatalf("document %d is %q, want %q", i, x.docs[i].key, k)
		}
	}
	if wrap && x.delta.gen > 10 {
		t.Fatalf("the delta's generation is %d: it never wrapped", x.delta.gen)
	}
}

// TestTermTable inserts and deletes at random in a table kept small and
// crowded, so runs are long and wrap around, and compares every lookup
// with a map.
func TestTermTable(t *testing.T) {
	var tt termTable
	ref := map[string]int{} // term → its list's first posting
	rng := rand.New(rand.NewPCG(13, 13))
	// Besides words anywhere, crowd the last and first slots, so runs wrap.
	var pool []string
	var atEnd, atStart, elsewhere int
	for k := 0; atEnd < 40 || atStart < 40; k++ {
		w := strconv.Itoa(k)
		switch home := termHash(w) & 1023; {
		case home >= 1016:
			if atEnd++; atEnd > 40 {
				continue
			}
		case home < 8:
			if atStart++; atStart > 40 {
				continue
			}
		default:
			if elsewhere++; elsewhere > 600 {
				continue
			}
		}
		pool = append(pool, w)
	}
	word := func() string { return pool[rng.IntN(len(pool))] }
	for op := range 200000 {
		w := word()
		h := termHash(w)
		i, ok := tt.find(w, h)
		if _, want := ref[w]; ok != want {
			t.Fatalf("op %d: find(%q) = %v, want %v", op, w, ok, want)
		}
		switch {
		case !ok && len(ref) < 500:
			pl := tt.insert(i, w, h)
			pl.post = append(pl.post, uint64(op))
			ref[w] = op
		case ok:
			if got := tt.inSlot(i); got.term != w || got.post[0] != uint64(ref[w]) {
				t.Fatalf("op %d: %q finds %q %v, want posting %d", op, w, got.term, got.post, ref[w])
			}
			if rng.IntN(2) == 0 {
				tt.delete(i)
				delete(ref, w)
			}
		}
		if tt.n != len(ref) {
			t.Fatalf("op %d: %d terms, want %d", op, tt.n, len(ref))
		}
		if op%1000 == 0 {
			for w, first := range ref {
				if pl := tt.get(w, termHash(w)); pl == nil || pl.post[0] != uint64(first) {
					t.Fatalf("op %d: %q lost", op, w)
				}
			}
		}
	}
	if len(tt.slots) != 1024 {
		t.Fatalf("table grew to %d slots; the test means to keep it crowded", len(tt.slots))
	}
}

// TestDeltaGrowsItsTable adds records with more distinct terms than the
// delta's table starts with room for, in one delta and across a merge, and
// checks every term's postings.
func TestDeltaGrowsItsTable(t *testing.T) {
	x := newTextIndex(nil)
	const docs, perDoc = 40, 500 // 20,000 distinct terms, 2 postings each
	for d := range docs {
		var texts [NumFields]string
		var b strings.Builder
		for i := range perDoc {
			fmt.Fprintf(&b, "t%dx%d ", d, i)
		}
		texts[0] = b.String()
		texts[3] = b.String() + b.String() // tf 2 in another field
		x.addTexts(fmt.Sprintf("k%d", d), int64(d), "g", texts)
	}
	if len(x.delta.slots) <= deltaSlots {
		t.Fatalf("delta table never grew: %d slots", len(x.delta.slots))
	}
	for d := range docs {
		for i := range perDoc {
			term := fmt.Sprintf("t%dx%d", d, i)
			post, df, ok := x.postingsOf(term)
			want := []uint64{
				packPosting(uint32(d), 0, 1, perDoc),
				packPosting(uint32(d), 3, 2, 2*perDoc),
			}
			if !ok || !slices.Equal(post, want) || df[0] != 1 || df[3] != 1 {
				t.Fatalf("term %s: postings %x df %v, want %x", term, post, df, want)
			}
		}
	}
}

// BenchmarkIndexThenNearest is a search of an index of 20,000 standard
// CMBs by one more CMB's own terms (the rarest 8 scored) and then its
// indexing: every search follows an addition, so postings added since the
// last search are always there to be found, read from the delta unmerged.
func BenchmarkIndexThenNearest(b *testing.B) {
	for _, cold := range []bool{false, true} {
		name := "warm"
		if cold {
			name = "cold"
		}
		b.Run(name, func(b *testing.B) {
			x, texts, keys := standardIndexSetup(b.N)
			o := SearchOptions{Limit: 10, Group: "g", MaxTerms: 8}
			normalizeSearch(&o)
			var q []string
			op := func(i int) {
				// The record's terms, as Search makes a query's.
				q = q[:0]
				for _, t := range texts[i%len(texts)] {
					all := appendTokens(q, t)
					q = all[:len(q)+len(x.termer.terms(all[len(q):]))]
				}
				_ = x.search(uniq(q), o, int64(i), false)
				x.addTexts(keys[i], int64(i), "g", texts[i%len(texts)])
			}
			// Cold as in a daemon, where the rest of admission and the
			// store run between records.
			benchOpsCPU(b, "cpu-ns/op", cold, op)
		})
	}
}

// TestStemWordDigits holds stemWord's shortcut for numbers to what the
// stemmer makes of them: numbers of every length up to 40 digits, at
// random and of one repeated digit, and words near numbers, which the
// shortcut must leave to the stemmer.
func TestStemWordDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	var words []string
	for n := 1; n <= 40; n++ {
		for d := '0'; d <= '9'; d++ {
			words = append(words, strings.Repeat(string(d), n))
		}
		for range 200 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte('0' + rng.IntN(10))
			}
			words = append(words, string(b))
		}
	}
	words = append(words, "", "1s", "1960s", "2nd", "y2k", "10y", "'1", "1'", "3.14", "1,000", "٣", "１")
	for _, w := range words {
		if got, want := stemWord(w), stemLetters(w); got != want {
			t.Fatalf("stemWord(%q) = %q, the stemmer's is %q", w, got, want)
		}
	}
}

// BenchmarkStemWordNumber is the cost of a stem cache miss on a number,
// as a record's own number and times are, by the stemmer and by stemWord.
func BenchmarkStemWordNumber(b *testing.B) {
	ws := make([]string, 1000)
	for i := range ws {
		ws[i] = strconv.Itoa(1764633600000 + i*7919)
	}
	for _, c := range []struct {
		name string
		stem func(string) string
	}{{"stemmer", stemLetters}, {"stemWord", stemWord}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				_ = c.stem(ws[i%len(ws)])
			}
		})
	}
}
