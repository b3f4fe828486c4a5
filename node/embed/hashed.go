package embed

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Hashed is the built-in encoder: character n-grams of each word (case
// folded, NFC, padded with a boundary mark) hashed into Dim signed buckets,
// L2-normalised. It is deterministic and needs nothing outside the binary:
// MMP §9.2 allows n-gram hashing as the fallback kernel where no semantic
// encoder is configured. It measures surface overlap, not meaning: two
// phrasings of one fact are far apart, a record and its near-copy close.
type Hashed struct {
	N   int // n-gram length
	Dim int
}

// DefaultHashed is the built-in kernel: trigrams into 512 buckets.
func DefaultHashed() Hashed { return Hashed{N: 3, Dim: 512} }

// Kernel names the hashed kernel by its parameters, so a change of either
// is a new kernel whose vectors are never compared with the old.
func (h Hashed) Kernel() Kernel {
	return Kernel{ID: fmt.Sprintf("hash-ngram%d-v1-d%d", h.N, h.Dim), Fingerprint: fmt.Sprintf("cmbnode-hash-ngram%d-v1/%d/l2", h.N, h.Dim), Dim: h.Dim}
}

// Encode never fails.
func (h Hashed) Encode(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = h.Vector(t)
	}
	return out, nil
}

// Vector is one text's vector; all zero for a text with no word: its
// Counts, L2-normalised.
func (h Hashed) Vector(text string) []float32 {
	c := make([]int32, h.Dim)
	h.Counts(text, c)
	v := make([]float32, h.Dim)
	for i, x := range c {
		v[i] = float32(x) // exact: a count is far below 2^24
	}
	Normalize(v)
	return v
}

// Counts adds text's signed n-gram counts into c (of length Dim): Vector
// before normalisation.
//
// Each n-gram's bucket is FNV-1a (64-bit) of the n-gram's UTF-8 bytes,
// computed in place: the counts are those of hashing each n-gram as a
// string, without a hasher or a string per n-gram.
func (h Hashed) Counts(text string, c []int32) {
	c = c[:h.Dim]
	if isASCII(text) {
		if h.N == 3 && h.Dim&(h.Dim-1) == 0 {
			addASCII3(c, text)
		} else {
			h.addASCII(c, text)
		}
		return
	}
	text = strings.ToLower(norm.NFC.String(text))
	g := make([]rune, 0, 32) // the word with its boundary marks
	flush := func() {
		if len(g) == 1 {
			return
		}
		g = append(g, '\x03')
		n := min(h.N, len(g))
		for i := 0; i+n <= len(g); i++ {
			x := uint64(fnvOffset64)
			var enc [utf8.UTFMax]byte
			for _, r := range g[i : i+n] {
				for _, c := range enc[:utf8.EncodeRune(enc[:], r)] {
					x ^= uint64(c)
					x *= fnvPrime64
				}
			}
			h.count(c, x)
		}
		g = g[:1]
	}
	g = append(g, '\x02')
	for _, r := range text {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			g = append(g, r)
			continue
		}
		flush()
	}
	flush()
}

// CountsWords is Counts and AppendWords at once: it adds text's n-gram
// counts into c and appends its words' hashes to words, reading an ASCII
// text once for both (the default kernel's). It also sets in touched the
// bit of every bucket whose count it changed (CountsTouched).
func (h Hashed) CountsWords(text string, c []int32, touched, words []uint64) []uint64 {
	if h.streams(text) {
		return addASCII3Words(c[:h.Dim], touched[:touchedLen(h.Dim)], text, words)
	}
	h.Counts(text, c)
	touchAll(touched, h.Dim)
	return h.AppendWords(words, text)
}

// CountsTouched is Counts that also sets in touched, (Dim+63)/64 words,
// bit b%64 of touched[b/64] for every bucket b whose count it changed,
// so a caller can read the nonzero counts without a pass over all Dim.
// It may set bits of buckets it left unchanged: all of them for a text
// it does not stream (not ASCII, or not the default kernel's n and Dim).
func (h Hashed) CountsTouched(text string, c []int32, touched []uint64) {
	if h.streams(text) {
		addASCII3Touched(c[:h.Dim], touched[:touchedLen(h.Dim)], text)
		return
	}
	h.Counts(text, c)
	touchAll(touched, h.Dim)
}

// streams reports whether text's counts are made by addASCII3 and its
// variants: trigrams of an ASCII text into a power-of-two Dim.
func (h Hashed) streams(text string) bool {
	return h.N == 3 && h.Dim&(h.Dim-1) == 0 && isASCII(text)
}

// touchedLen is how many words hold a bit for each of dim buckets.
func touchedLen(dim int) int { return (dim + 63) / 64 }

// touchAll sets the bits of all dim buckets in touched.
func touchAll(touched []uint64, dim int) {
	for b := 0; b < dim; b += 64 {
		touched[b/64] |= ^uint64(0) >> max(64-(dim-b), 0)
	}
}

// AppendWords appends the FNV-1a (64-bit) hash of each of text's words,
// in order, as Counts reads words: runs of letters and digits, NFC and
// case folded. Texts whose words are the same give the same hashes
// whatever their punctuation, case or spacing, as they give the same
// counts.
func (h Hashed) AppendWords(dst []uint64, text string) []uint64 {
	x, in := uint64(fnvOffset64), false
	if isASCII(text) {
		for i := 0; i < len(text); i++ {
			c := asciiFold[text[i]]
			if c == 0 {
				if in {
					dst = append(dst, x)
				}
				x, in = fnvOffset64, false
				continue
			}
			x = (x ^ uint64(c)) * fnvPrime64
			in = true
		}
	} else {
		var enc [utf8.UTFMax]byte
		for _, r := range strings.ToLower(norm.NFC.String(text)) {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				if in {
					dst = append(dst, x)
				}
				x, in = fnvOffset64, false
				continue
			}
			for _, c := range enc[:utf8.EncodeRune(enc[:], r)] {
				x = (x ^ uint64(c)) * fnvPrime64
			}
			in = true
		}
	}
	if in {
		dst = append(dst, x)
	}
	return dst
}

// FNV-1a's 64-bit parameters (hash/fnv).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func isASCII(s string) bool {
	for ; len(s) >= 8; s = s[8:] {
		// Eight bytes at once, one load.
		x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		if x&0x8080808080808080 != 0 {
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// addASCII is Vector's n-gram counting for ASCII text, which NFC leaves
// as it is and whose letters and digits are single bytes: the same
// buckets, without normalising, lowering or decoding the text first.
func (h Hashed) addASCII(v []int32, text string) {
	var buf [64]byte
	w := append(buf[:0], '\x02') // the word with its boundary marks
	flush := func() {
		if len(w) == 1 {
			return
		}
		w = append(w, '\x03')
		n := min(h.N, len(w))
		for i := 0; i+n <= len(w); i++ {
			x := uint64(fnvOffset64)
			for _, c := range w[i : i+n] {
				x ^= uint64(c)
				x *= fnvPrime64
			}
			h.count(v, x)
		}
		w = w[:1]
	}
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case 'A' <= c && c <= 'Z':
			w = append(w, c+'a'-'A')
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			w = append(w, c)
		default:
			flush()
		}
	}
	flush()
}

// addASCII3 is addASCII for trigrams into a power-of-two Dim (the default
// kernel), streamed: each byte of the text closes the trigram of the two
// before it, so no word is copied.
func addASCII3(v []int32, text string) {
	mask := uint64(len(v) - 1)
	// The two bytes before, as foldEnd gives them (3: no letter). Every
	// byte adds to a bucket without branching: its trigram's count when
	// the byte before it is a letter, else 0. A word's first letter
	// closes no trigram; a byte after a letter that is not one closes
	// the word's last, of end mark 3; stepA makes the mark 3 before a
	// word's first letter the start mark 2.
	p2, p1 := uint64(3), uint64(3)
	for i := 0; i < len(text); i++ {
		c := uint64(foldEnd[text[i]])
		x := ((stepA[uint8(p2)]^p1)*fnvPrime64 ^ c) * fnvPrime64
		v[x&mask] += signed(x, letterMask[uint8(p1)])
		p2, p1 = p1, c
	}
	if p1 != 3 {
		x := ((stepA[uint8(p2)]^p1)*fnvPrime64 ^ 3) * fnvPrime64
		v[x&mask] += signed(x, ^uint64(0))
	}
}

// addASCII3Touched is addASCII3 setting in touched (CountsTouched) the
// bit of each bucket it adds a count to.
func addASCII3Touched(v []int32, touched []uint64, text string) {
	mask := uint64(len(v) - 1)
	p2, p1 := uint64(3), uint64(3)
	for i := 0; i < len(text); i++ {
		c := uint64(foldEnd[text[i]])
		x := ((stepA[uint8(p2)]^p1)*fnvPrime64 ^ c) * fnvPrime64
		b := x & mask
		m1 := letterMask[uint8(p1)]
		v[b] += signed(x, m1)
		touched[b/64] |= m1 & (1 << (b % 64))
		p2, p1 = p1, c
	}
	if p1 != 3 {
		x := ((stepA[uint8(p2)]^p1)*fnvPrime64 ^ 3) * fnvPrime64
		b := x & mask
		v[b] += signed(x, ^uint64(0))
		touched[b/64] |= 1 << (b % 64)
	}
}

// addASCII3Words is addASCII3Touched that also appends each word's hash
// (AppendWords's) to words, made in the same pass.
//
// It carries, from one byte to the next, what addASCII3 looks up again:
// s, the FNV-1a state of the two bytes before (stepA of the first, then
// the second), st, stepA of the byte before, and m1, its letterMask. Its
// buckets are x & n with n = len(v)-1, which the compiler knows is in v.
// Each of these is a register the loop keeps, not a load or a check:
// the loop is bound by its instructions, not by its multiplications.
func addASCII3Words(v []int32, touched []uint64, text string, words []uint64) []uint64 {
	n := len(v) - 1 // a power of two less one: the bucket mask
	if n < 0 {
		return words
	}
	nw := len(words)
	// A text of n bytes has at most n/2+1 words; each byte writes the
	// word hash so far at nw, which only moves past a finished word.
	ws := slices.Grow(words, len(text)/2+1)
	ws = ws[:cap(ws)]
	// Before the text, as after a byte that is not a letter: the two
	// bytes before are 3, whose stepA is the start mark's.
	s, st, m1 := (stepA[3]^3)*fnvPrime64, stepA[3], uint64(0)
	w := uint64(fnvOffset64)
	for i := 0; i < len(text); i++ {
		c := uint64(foldEnd[text[i]])
		x := (s ^ c) * fnvPrime64
		s, st = (st^c)*fnvPrime64, stepA[c]
		b := int(x) & n
		v[b] += signed(x, m1)
		touched[b>>6] |= m1 & (1 << (b & 63))
		ws[nw] = w
		mc := letterMask[c]
		nw += int(m1 &^ mc & 1) // a letter then not one
		next := (w ^ c) * fnvPrime64
		if c == 3 { // a conditional move
			next = fnvOffset64
		}
		w, m1 = next, mc
	}
	if m1 != 0 { // the text ends in a letter: its word's last trigram
		x := (s ^ 3) * fnvPrime64
		b := int(x) & n
		v[b] += signed(x, ^uint64(0))
		touched[b>>6] |= 1 << (b & 63)
		ws[nw] = w
		nw++
	}
	return ws[:nw]
}

// letterMask is all ones at a letter or digit as foldEnd gives it, else 0
// (at foldEnd's 3).
var letterMask = func() (t [256]uint64) {
	for c := range t {
		if asciiFold[c] != 0 {
			t[c] = ^uint64(0)
		}
	}
	return t
}()

// signed is the count an n-gram of hash x adds, m all ones when the byte
// before its last is a letter (letterMask), else 0: +1 or -1 by the
// hash's top bit, or 0.
func signed(x, m uint64) int32 { return int32(int64(x)>>63|1) & int32(m) }

// foldEnd is asciiFold with the end mark 3 for anything not a letter or
// digit, which no letter or digit folds to.
var foldEnd = func() (t [256]byte) {
	for c := range t {
		t[c] = max(asciiFold[c], 3)
	}
	return t
}()

// stepA is fnvStep1 of a trigram's first byte as foldEnd gives it: of
// the start mark 2 for the 3 of no letter.
var stepA = func() (t [256]uint64) {
	t = fnvStep1
	t[3] = fnvStep1[2]
	return t
}()

// asciiFold maps an ASCII letter or digit to itself lowered, anything
// else to 0 (a word boundary).
var asciiFold = func() (t [256]byte) {
	for c := range t {
		switch {
		case 'A' <= c && c <= 'Z':
			t[c] = byte(c) + 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			t[c] = byte(c)
		}
	}
	return t
}()

// fnvStep1 is FNV-1a's state after one byte.
var fnvStep1 = func() (t [256]uint64) {
	for c := range t {
		t[c] = (fnvOffset64 ^ uint64(c)) * fnvPrime64
	}
	return t
}()

// count adds an n-gram of hash x to its signed bucket.
func (h Hashed) count(v []int32, x uint64) {
	var b uint64
	if h.Dim&(h.Dim-1) == 0 {
		b = x & uint64(h.Dim-1) // x % Dim, without a division
	} else {
		b = x % uint64(h.Dim)
	}
	if x>>63 == 1 {
		v[b]--
	} else {
		v[b]++
	}
}
