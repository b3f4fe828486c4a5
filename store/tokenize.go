package store

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/blevesearch/segment"
	"github.com/kljensen/snowball/english"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Tokenize turns text into words: case-folded (full Unicode folding),
// NFC-normalised, and segmented by the word rules of UAX #29 as
// github.com/blevesearch/segment implements them: its letter, number, kana
// and ideograph segments are the words (so "can't", "3.14" and "1,000" stay
// whole, ideographs come one by one), everything else (space, punctuation,
// symbols, emoji) separates them. Index terms are made from these words by
// a termer (stop words dropped, the rest stemmed).
func Tokenize(text string) []string {
	return appendTokens(nil, text)
}

// Byte classes for segmenting ASCII without the segmenter's state machine.
const (
	asciiSep   = iota // separates words
	asciiWord         // letter, digit or underscore
	asciiMid          // ' . : , ; — inside a word between two letters or digits
	asciiSpace        // white space: a word boundary in every script (UAX #29 WB3a/b, WB999)
	nonASCII          // starts or continues a multi-byte rune
)

var byteClass = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c >= utf8.RuneSelf:
			t[c] = nonASCII
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || 'A' <= c && c <= 'Z':
			t[c] = asciiWord
		case c == '\'' || c == '.' || c == ':' || c == ',' || c == ';':
			t[c] = asciiMid
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			t[c] = asciiSpace
		}
	}
	return t
}()

// appendTokens appends the words of text (see Tokenize) to dst.
//
// The folded text is cut at ASCII white space, which UAX #29 never joins
// to a word. A piece that is all ASCII is segmented here, by the rules the
// segmenter applies to ASCII (WB5-WB13b: letters, digits and "_" join; ' . :
// join letters, ' . , ; join digits); any other piece goes to the segmenter.
// TestTokenizeMatchesSegmenter holds the two to the same words: the fast
// path only spares the segmenter's cost (about 20 µs per KB) on the text
// most records carry. A text that is all ASCII is segmented whole, without
// cutting it first: appendASCIIWords treats white space as any other
// separator, and a separator never joins a word on either side, so the
// words are those of its pieces.
func appendTokens(dst []string, text string) []string {
	if text == "" {
		return dst
	}
	s, ascii := fold(text)
	if ascii {
		return appendASCIIWords(dst, s)
	}
	for i := 0; i < len(s); {
		for i < len(s) && byteClass[s[i]] == asciiSpace {
			i++
		}
		j, ascii := i, true
		for j < len(s) && byteClass[s[j]] != asciiSpace {
			ascii = ascii && s[j] < utf8.RuneSelf
			j++
		}
		if i == j {
			break
		}
		if ascii {
			dst = appendASCIIWords(dst, s[i:j])
		} else {
			dst = appendSegmented(dst, s[i:j])
		}
		i = j
	}
	return dst
}

// appendASCIIWords segments s, ASCII, as the segmenter would: white space
// separates words as any separator does.
func appendASCIIWords(dst []string, s string) []string {
	start := -1
	var prev byte
	for i := 0; i < len(s); {
		c := s[i]
		switch byteClass[c] {
		case asciiWord:
			if start < 0 {
				start = i
			}
			for i++; i < len(s) && byteClass[s[i]] == asciiWord; i++ {
			}
			prev = s[i-1]
			continue
		case asciiMid:
			if start >= 0 && i+1 < len(s) && midASCII(c, prev, s[i+1]) {
				prev = c
				i++
				continue
			}
		}
		if start >= 0 {
			dst = append(dst, s[start:i])
			start = -1
		}
		prev = c
		i++
	}
	if start >= 0 {
		dst = append(dst, s[start:])
	}
	return dst
}

// midASCII reports whether c, between word bytes p and n, stays inside the
// word (UAX #29 WB6/7 for letters, WB11/12 for digits).
func midASCII(c, p, n byte) bool {
	switch c {
	case '\'', '.', ':':
		if isASCIILetter(p) && isASCIILetter(n) {
			return true
		}
	}
	switch c {
	case ',', '.', ';', '\'':
		if '0' <= p && p <= '9' && '0' <= n && n <= '9' {
			return true
		}
	}
	return false
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// appendSegmented appends the words the segmenter finds in s. Its segments
// are slices of the bytes it is given, which here are s's own, so each word
// is a substring of s: no copy.
func appendSegmented(dst []string, s string) []string {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	segs, types, _, err := segment.SegmentWordsDirect(b, nil, nil)
	if err != nil {
		// The segmenter reports an error only for input it cannot
		// advance over, which valid UTF-8 from fold never is; take the
		// words found so far rather than none.
		segs = segs[:min(len(segs), len(types))]
	}
	for k, seg := range segs {
		if types[k] == segment.None || len(seg) == 0 {
			continue
		}
		off := cap(b) - cap(seg)
		dst = append(dst, s[off:off+len(seg)])
	}
	return dst
}

// fold case-folds and NFC-normalises text, and reports whether it is all
// ASCII (and so is what it returns). ASCII, the common case, needs neither
// tables nor allocation beyond the lowered copy.
func fold(text string) (folded string, ascii bool) {
	ascii, upper := true, false
	i := 0
	// Eight bytes at a time: any high bit means non-ASCII; for ASCII bytes,
	// b+0x3f has its high bit set iff b >= 'A' and b+0x25 iff b > 'Z', and
	// neither sum carries into the next byte.
	const ones, high = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(text); i += 8 {
		b := text[i : i+8]
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if w&high != 0 {
			ascii = false
			break
		}
		if (w+0x3f*ones)&^(w+0x25*ones)&high != 0 {
			upper = true
		}
	}
	for ; ascii && i < len(text); i++ {
		c := text[i]
		if c >= utf8.RuneSelf {
			ascii = false
		}
		if 'A' <= c && c <= 'Z' {
			upper = true
		}
	}
	if ascii {
		if !upper {
			return text, true
		}
		b := []byte(text)
		for i, c := range b {
			if 'A' <= c && c <= 'Z' {
				b[i] = c + 'a' - 'A'
			}
		}
		return string(b), true
	}
	// A Caser carries state, so each call gets its own.
	return norm.NFC.String(cases.Fold().String(text)), false
}

// termer makes index terms from words (Tokenize): English stop words are
// dropped and the rest stemmed, both by github.com/kljensen/snowball (its
// English stop-word list and the Snowball English stemmer, whose step 0
// strips possessives: "melanie's" and "melanie" are one term, as are
// "releases" and "release", "shipping" and "ship"). Records and queries
// go through the same termer, so a query term matches exactly the postings
// its word's stem was indexed under.
//
// The stemmer allocates and takes ~230 ns a word, several times what
// indexing a posting costs; text repeats its words, so stems are cached,
// in two generations (when the current one fills it becomes the old one,
// and words found there move back), which bounds the cache whatever the
// vocabulary. The cache only ever maps a word to its stem (and the stem's
// termHash, which the text index needs next), so what is in it never
// changes a term.
type termer struct {
	mu       sync.Mutex
	cur, old stemCache
	touched  uint32 // sums what touch loaded; it means nothing
}

// stemGroup is how many words' cache entries are loaded at a time: the
// more cache misses in flight together, the less each costs, and 64 words
// (a field and more of a standard CMB; 64 entries of 64 bytes) are far
// from crowding L1 out before they are read.
const stemGroup = 64

// stemCache is one generation of the termer's cache: a hash table with
// linear probing over wordHash of the word whose slots are the entries
// themselves, at most half of them full. An entry (one 64-byte cache line)
// carries the word's length and its first and last eight bytes, so a
// lookup of a word of up to 16 bytes (most words) touches its entry, most
// often the one at its home slot, and never the cached word's own bytes,
// where a map[string]string reads them to compare, and a table of indices
// into the entries another line first.
type stemCache struct {
	ents []stemEntry // wlen 0 marks an empty slot: no word is empty
	n    int         // entries in use
}

type stemEntry struct {
	head  wordHead
	shash uint32 // termHash(stem)
	wlen  uint32
	// lid is the stem's term in the text index's delta (textdelta.go),
	// valid while dgen is the delta's generation: the word's next
	// occurrence finds its delta term here, without a lookup in the
	// delta's own table. The word's hash, which this entry's place in
	// the table comes from, is not kept (it is recomputed when the table
	// grows), to leave the room in the entry's cache line.
	lid  uint32
	dgen uint32
	word string // a copy: the cache does not keep records' texts alive
	stem string // "" for a stop word
}

// wordHead is a word's first eight bytes and its last eight (zero-padded
// when shorter): with its length, all of a word of up to 16 bytes.
type wordHead struct{ first, last uint64 }

// termCacheSize is each generation's bound: a few MB at most, past the
// working vocabulary of most stores.
const termCacheSize = 1 << 15

// headOf is s's wordHead.
func headOf(s string) wordHead {
	switch n := len(s); {
	case n >= 8:
		return wordHead{load64(s), load64(s[n-8:])}
	case n >= 4:
		// Two loads that overlap in the bytes they both hold.
		return wordHead{first: uint64(load32(s)) | uint64(load32(s[n-4:]))<<(8*(n-4))}
	case n > 0:
		return wordHead{first: uint64(s[0]) | uint64(s[n>>1])<<(8*(n>>1)) | uint64(s[n-1])<<(8*(n-1))}
	}
	return wordHead{}
}

// wordKey is what finding a word in the cache takes: its head and hash.
type wordKey struct {
	head wordHead
	hash uint32 // wordHash
}

// keyOf is w's wordKey.
func keyOf(w string) wordKey {
	head := headOf(w)
	return wordKey{head, wordHash(w, head)}
}

// wordHash hashes word w, of head head, for the stem cache: a word of up
// to 16 bytes is its length and head, which are hashed as termHash hashes
// its bytes, without loading them again; a longer one by termHash.
func wordHash(w string, head wordHead) uint32 {
	if len(w) > 16 {
		return termHash(w)
	}
	return uint32(mix(hashKey[1]^uint64(len(w)), mix(head.first^hashKey[1], head.last^hashKey[0])))
}

// find returns w's entry (of key k), or nil.
func (c *stemCache) find(w string, k wordKey) *stemEntry {
	if len(c.ents) == 0 {
		return nil
	}
	head := k.head
	mask := uint32(len(c.ents) - 1)
	for i := k.hash & mask; ; i = (i + 1) & mask {
		e := &c.ents[i]
		if e.wlen == 0 {
			return nil
		}
		if e.head == head && e.wlen == uint32(len(w)) && (len(w) <= 16 || e.word[8:len(w)-8] == w[8:len(w)-8]) {
			return e
		}
	}
}

// touch loads the entries at the home slots of the words of keys ks,
// which looking them up will read, and returns a sum of them so the loads
// are kept.
func (c *stemCache) touch(ks []wordKey) uint32 {
	if len(c.ents) == 0 {
		return 0
	}
	mask := uint32(len(c.ents) - 1)
	var sum uint32
	for _, k := range ks {
		sum += c.ents[k.hash&mask].wlen
	}
	return sum
}

// put adds e, whose word (of hash h) is not in c, and returns it in c.
func (c *stemCache) put(e stemEntry, h uint32) *stemEntry {
	if 2*(c.n+1) > len(c.ents) {
		old := c.ents
		c.ents = make([]stemEntry, max(2*len(old), 4096))
		for k := range old {
			if old[k].wlen != 0 {
				*c.slot(wordHash(old[k].word, old[k].head)) = old[k]
			}
		}
	}
	c.n++
	p := c.slot(h)
	*p = e
	return p
}

// slot is the empty slot where an entry of word hash h goes.
func (c *stemCache) slot(h uint32) *stemEntry {
	mask := uint32(len(c.ents) - 1)
	i := h & mask
	for c.ents[i].wlen != 0 {
		i = (i + 1) & mask
	}
	return &c.ents[i]
}

// terms rewrites words in place into their terms, dropping stop words, and
// returns the terms (a prefix of words). A nil termer stems without a cache;
// any other returns its cache's copies of the terms, never substrings of
// the words, so an index may keep them (textdelta.go).
func (tm *termer) terms(words []string) []string {
	out := words[:0]
	if tm == nil {
		for _, w := range words {
			if t := stemWord(w); t != "" {
				out = append(out, t)
			}
		}
		return out
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	var ks [stemGroup]wordKey
	for i, w := range words {
		// A group at a time: the words' keys first, then their slots and
		// entries loaded together, so that the cache misses of a group's
		// lookups overlap (the cache is larger than L2, and cold in a
		// daemon between records); one after another, each lookup waited
		// for its own (most of terms' time in a sender's profile).
		if i%stemGroup == 0 {
			tm.touchLocked(words[i:min(i+stemGroup, len(words))], &ks)
		}
		if e := tm.entryLocked(w, ks[i%stemGroup]); e.stem != "" {
			out = append(out, e.stem)
		}
	}
	return out
}

// touchLocked sets ks to the keys of words (at most stemGroup) and loads
// their home slots in the current generation, which looking them up will
// read.
func (tm *termer) touchLocked(words []string, ks *[stemGroup]wordKey) {
	for k, w := range words {
		ks[k] = keyOf(w)
	}
	tm.touched += tm.cur.touch(ks[:len(words)])
}

// entryLocked returns word w's entry (k is keyOf(w)) in the current
// generation, which it is moved to from the old one, or added to.
func (tm *termer) entryLocked(w string, k wordKey) *stemEntry {
	e := tm.cur.find(w, k)
	if e == nil {
		if e = tm.old.find(w, k); e == nil {
			e = tm.putLocked(stemEntry{head: k.head, wlen: uint32(len(w)), word: w, stem: stemWord(w)}, k.hash, true)
		} else {
			e = tm.putLocked(*e, k.hash, false)
		}
	}
	return e
}

// forgetDelta drops every entry's delta term (stemEntry.lid), for a delta
// whose generations start again from the first.
func (tm *termer) forgetDelta() {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, c := range []*stemCache{&tm.cur, &tm.old} {
		for k := range c.ents {
			c.ents[k].dgen = 0
		}
	}
}

// putLocked adds e, of word hash h, to the current generation (fresh: its
// word and stem are not copies yet, nor its stem hashed) and returns it
// there.
func (tm *termer) putLocked(e stemEntry, h uint32, fresh bool) *stemEntry {
	if tm.cur.n >= termCacheSize {
		tm.old, tm.cur = tm.cur, stemCache{}
	}
	if fresh {
		// Words are substrings of a record's text: the key is copied so
		// that the cache does not keep whole texts alive. A stem equal to
		// its word shares the copy.
		e.word = strings.Clone(e.word)
		if e.stem != "" && e.stem == e.word {
			e.stem = e.word
		} else {
			e.stem = strings.Clone(e.stem)
		}
		if e.stem != "" {
			e.shash = termHash(e.stem)
		}
	}
	return tm.cur.put(e, h)
}

// stemWord is w's term, or "" if w is a stop word (before or after
// stemming: "it's" stems to the stop word "it"). An irregular form is
// stemmed as its base form (lemma.go).
func stemWord(w string) string {
	if isDigits(w) {
		// A number is its own term: no stop word or irregular form is
		// one, and the stemmer only ever lowers case, strips suffixes of
		// letters and apostrophes and turns a 'y' into an 'i', none of
		// which touches a digit (TestStemWordDigits). Numbers are most of
		// what the stem cache misses (a record's own number and times,
		// met nowhere else), and the stemmer costs ~1 µs where this
		// costs a pass over the word.
		return w
	}
	return stemLetters(w)
}

// stemLetters is stemWord without its shortcut for numbers: the stop
// words, the irregular forms and the snowball stemmer.
func stemLetters(w string) string {
	if english.IsStopWord(w) {
		return ""
	}
	if base, ok := irregular[w]; ok {
		w = base
	}
	t := english.Stem(w, false)
	if t != w && english.IsStopWord(t) {
		return ""
	}
	return t
}

// isDigits reports whether w is ASCII digits alone (and not empty).
func isDigits(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < '0' || w[i] > '9' {
			return false
		}
	}
	return w != ""
}

// docTerms is one record's contribution to the text index.
type docTerms struct {
	lens [NumFields]uint32
	// terms holds one entry per (term, field) the record contains, grouped
	// by term: a term's fields are adjacent, in ascending order.
	terms []fieldTerm
}

type fieldTerm struct {
	term  string
	hash  uint32 // termHash(term)
	tf    uint16 // saturating; postings keep at most tfMax anyway
	field uint8
}

const neutralText = "neutral"

// analyzer is the scratch space of analyze: the tokens of one field and a
// small open-addressing table over the record's distinct terms.
type analyzer struct {
	toks  []string
	slots []uint32 // index+1 into dist; 0 is empty
	dist  []distinctTerm
	pairs int // (term, field) pairs so far
}

type distinctTerm struct {
	term   string
	hash   uint32
	fields uint8 // bit f set: the term occurs in field f
	tf     [NumFields]uint32
}

const analyzerSlots = 256 // twice the distinct terms of a large record

var analyzers = sync.Pool{New: func() any {
	return &analyzer{slots: make([]uint32, analyzerSlots)}
}}

// analyze turns a record's texts into its index terms, through tm.
func analyze(tm *termer, texts [NumFields]string) docTerms {
	var d docTerms
	a := analyzers.Get().(*analyzer)
	for f, t := range texts {
		if t == neutralText {
			// The protocol's placeholder for an unfilled field says nothing
			// about the record and would only dilute the field's statistics.
			continue
		}
		a.toks = tm.terms(appendTokens(a.toks[:0], t))
		d.lens[f] = uint32(len(a.toks))
		for _, tok := range a.toks {
			a.count(tok, f)
		}
	}
	d.terms = make([]fieldTerm, a.pairs)
	n := 0
	for i := range a.dist {
		e := &a.dist[i]
		for m := e.fields; m != 0; m &= m - 1 {
			f := bits.TrailingZeros8(m)
			ft := &d.terms[n]
			ft.term, ft.hash, ft.field, ft.tf = e.term, e.hash, uint8(f), uint16(min(e.tf[f], math.MaxUint16))
			n++
		}
	}
	// Drop the references to this record's texts before the scratch is
	// reused; a table grown for an unusually long record is not kept.
	clear(a.toks)
	a.toks = a.toks[:0]
	clear(a.dist)
	a.dist = a.dist[:0]
	a.pairs = 0
	if len(a.slots) <= 4*analyzerSlots {
		clear(a.slots)
		analyzers.Put(a)
	}
	return d
}

// count adds one occurrence of tok in field f.
func (a *analyzer) count(tok string, f int) {
	h := termHash(tok)
	mask := uint32(len(a.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := a.slots[i]
		if s == 0 {
			// Field by field: a composite literal here is built on the
			// stack and copied, which stalls on store forwarding.
			a.dist = append(a.dist, distinctTerm{})
			e := &a.dist[len(a.dist)-1]
			e.term, e.hash, e.fields = tok, h, 1<<f
			e.tf[f] = 1
			a.slots[i] = uint32(len(a.dist))
			a.pairs++
			if 2*len(a.dist) > len(a.slots) {
				a.grow()
			}
			return
		}
		if e := &a.dist[s-1]; e.hash == h && e.term == tok {
			if e.fields&(1<<f) == 0 {
				e.fields |= 1 << f
				a.pairs++
			}
			e.tf[f]++
			return
		}
	}
}

func (a *analyzer) grow() {
	a.slots = rehash(2*len(a.slots), len(a.dist), func(j int) uint32 { return a.dist[j].hash })
}

// rehash builds a table of size slots (a power of two) over n entries,
// with linear probing: slot i holds the index+1 of an entry whose hash
// (hashOf) starts its probe at or before i; 0 is empty.
func rehash(size, n int, hashOf func(j int) uint32) []uint32 {
	slots := make([]uint32, size)
	mask := uint32(size - 1)
	for j := range n {
		i := hashOf(j) & mask
		for slots[i] != 0 {
			i = (i + 1) & mask
		}
		slots[i] = uint32(j + 1)
	}
	return slots
}

// termHash hashes a term for analyze's table and the text index's: a
// wyhash-style multiply-mix like the runtime's map hash where AES is
// missing, about twice as fast as hash/maphash on short strings, keyed per
// process so that records cannot be made to collide on purpose.
func termHash(p string) uint32 {
	seed := hashKey[0]
	n := len(p)
	var a, b uint64
	switch {
	case n == 0:
	case n < 4:
		a = uint64(p[0])<<16 | uint64(p[n>>1])<<8 | uint64(p[n-1])
	case n <= 8:
		a = uint64(load32(p))
		b = uint64(load32(p[n-4:]))
	case n <= 16:
		a = load64(p)
		b = load64(p[n-8:])
	default:
		for i := 0; n-i > 16; i += 16 {
			seed = mix(load64(p[i:])^hashKey[1], load64(p[i+8:])^seed)
		}
		a = load64(p[n-16:])
		b = load64(p[n-8:])
	}
	return uint32(mix(hashKey[1]^uint64(n), mix(a^hashKey[1], b^seed)))
}

var hashKey = [2]uint64{rand.Uint64(), rand.Uint64()}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func load32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
