package store

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Tokenize turns text into search terms: case-folded (full Unicode folding),
// NFC-normalised, split on Unicode word boundaries. The segmentation follows
// the word rules of UAX #29 that matter for search, without a dictionary:
//   - runs of letters, marks, digits and connector punctuation form a word;
//   - an apostrophe, middle dot, colon or full stop between two letters, and
//     a comma, full stop or semicolon between two digits, stay inside it
//     ("can't", "3.14", "1,000");
//   - Han, Hiragana and other scripts written without spaces yield one term
//     per character, as UAX #29 breaks between ideographs;
//   - everything else (space, punctuation, symbols, emoji) separates words.
func Tokenize(text string) []string {
	return appendTokens(nil, text)
}

// Byte classes for tokenising ASCII without decoding or table lookups.
const (
	asciiSep  = iota // separates words
	asciiWord        // letter, digit or underscore
	asciiMid         // ' . : , ; — inside a word between two letters or digits
	nonASCII         // starts or continues a multi-byte rune
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
		}
	}
	return t
}()

// appendTokens appends the terms of text (see Tokenize) to dst.
func appendTokens(dst []string, text string) []string {
	if text == "" {
		return dst
	}
	s := foldNFC(text)
	start := -1
	var prev rune
	for i := 0; i < len(s); {
		// ASCII: the same decisions as below without decoding, table
		// lookups or the checks that only non-ASCII runes can pass.
		switch c := s[i]; byteClass[c] {
		case asciiWord:
			if start < 0 {
				start = i
			}
			for i++; i < len(s) && byteClass[s[i]] == asciiWord; i++ {
			}
			prev = rune(s[i-1])
			continue
		case asciiMid:
			if start >= 0 && isMidASCII(c, prev, s[i+1:]) {
				prev = rune(c)
				i++
				continue
			}
			fallthrough
		case asciiSep:
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
			prev = rune(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case isIdeo(r):
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
			dst = append(dst, s[i:i+n])
		case isWordRune(r):
			if start < 0 {
				start = i
			}
		case start >= 0 && isMid(r, prev, s[i+n:]):
			// stays inside the word; the next rune continues it
		case start >= 0 && isFormat(r):
			// joiners and format controls never split a word
		default:
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
		}
		prev = r
		i += n
	}
	if start >= 0 {
		dst = append(dst, s[start:])
	}
	return dst
}

// isMidASCII is isMid for an ASCII r; it decides without decoding when prev
// and the byte after r are ASCII too.
func isMidASCII(c byte, prev rune, rest string) bool {
	if len(rest) == 0 || prev >= utf8.RuneSelf || rest[0] >= utf8.RuneSelf {
		return isMid(rune(c), prev, rest)
	}
	p, n := byte(prev), rest[0]
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

// foldNFC case-folds and NFC-normalises. ASCII, the common case, needs
// neither tables nor allocation beyond the lowered copy.
func foldNFC(text string) string {
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
			return text
		}
		b := []byte(text)
		for i, c := range b {
			if 'A' <= c && c <= 'Z' {
				b[i] = c + 'a' - 'A'
			}
		}
		return string(b)
	}
	// A Caser carries state, so each call gets its own.
	return norm.NFC.String(cases.Fold().String(text))
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || 'A' <= r && r <= 'Z' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) ||
		unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Me, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.No, r) || unicode.Is(unicode.Pc, r)
}

func isIdeo(r rune) bool {
	if r < 0x0e00 {
		return false
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Thai, r) || unicode.Is(unicode.Lao, r) || unicode.Is(unicode.Khmer, r) ||
		unicode.Is(unicode.Myanmar, r)
}

func isFormat(r rune) bool { return r >= 0xad && unicode.Is(unicode.Cf, r) }

// isMid reports whether r, found after prev inside a word, joins prev to the
// rune that follows it (UAX #29 WB6/7 and WB11/12).
func isMid(r, prev rune, rest string) bool {
	next, n := utf8.DecodeRuneInString(rest)
	if n == 0 {
		return false
	}
	letter := func(c rune) bool { return unicode.IsLetter(c) && !isIdeo(c) }
	switch r {
	case '\'', '\u2019', '.', '\u00b7', ':', '\u2027', '\ufe13', '\ufe55', '\uff1a', '\uff07', '\uff0e', '\u2018', '\u2024', '\ufe52':
		if letter(prev) && letter(next) {
			return true
		}
	}
	switch r {
	case ',', '.', ';', '\'', '\u037e', '\u066c', '\ufe50', '\ufe54', '\uff0c', '\uff1b', '\u2019', '\u2018', '\u2024', '\ufe52', '\uff07', '\uff0e':
		if unicode.IsDigit(prev) && unicode.IsDigit(next) {
			return true
		}
	}
	return false
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

func analyze(texts [NumFields]string) docTerms {
	var d docTerms
	a := analyzers.Get().(*analyzer)
	for f, t := range texts {
		if t == neutralText {
			// The protocol's placeholder for an unfilled field says nothing
			// about the record and would only dilute the field's statistics.
			continue
		}
		a.toks = appendTokens(a.toks[:0], t)
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
