package node

// The ranking recall had before issue #19, frozen for the evaluation only
// (recall_eval_test.go compares against it): its tokenizer (no stemming,
// no stop words) and per-field BM25 with recency, k1 1.2, b 0.75, equal
// field weights, RecencyWeight 0.1 over a 7-day half-life. Production has
// no switch back to it.

import (
	"math"
	"sort"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Byte classes for tokenising ASCII without decoding or table lookups.
const (
	oldAsciiSep  = iota // separates words
	oldAsciiWord        // letter, digit or underscore
	oldAsciiMid         // ' . : , ; — inside a word between two letters or digits
	oldNonASCII         // starts or continues a multi-byte rune
)

var oldByteClass = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c >= utf8.RuneSelf:
			t[c] = oldNonASCII
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || 'A' <= c && c <= 'Z':
			t[c] = oldAsciiWord
		case c == '\'' || c == '.' || c == ':' || c == ',' || c == ';':
			t[c] = oldAsciiMid
		}
	}
	return t
}()

// oldAppendTokens appends the terms of text (see Tokenize) to dst.
func oldAppendTokens(dst []string, text string) []string {
	if text == "" {
		return dst
	}
	s := oldFoldNFC(text)
	start := -1
	var prev rune
	for i := 0; i < len(s); {
		// ASCII: the same decisions as below without decoding, table
		// lookups or the checks that only non-ASCII runes can pass.
		switch c := s[i]; oldByteClass[c] {
		case oldAsciiWord:
			if start < 0 {
				start = i
			}
			for i++; i < len(s) && oldByteClass[s[i]] == oldAsciiWord; i++ {
			}
			prev = rune(s[i-1])
			continue
		case oldAsciiMid:
			if start >= 0 && oldIsMidASCII(c, prev, s[i+1:]) {
				prev = rune(c)
				i++
				continue
			}
			fallthrough
		case oldAsciiSep:
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
		case oldIsIdeo(r):
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
			dst = append(dst, s[i:i+n])
		case oldIsWordRune(r):
			if start < 0 {
				start = i
			}
		case start >= 0 && oldIsMid(r, prev, s[i+n:]):
			// stays inside the word; the next rune continues it
		case start >= 0 && oldIsFormat(r):
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

// oldIsMidASCII is oldIsMid for an ASCII r; it decides without decoding when prev
// and the byte after r are ASCII too.
func oldIsMidASCII(c byte, prev rune, rest string) bool {
	if len(rest) == 0 || prev >= utf8.RuneSelf || rest[0] >= utf8.RuneSelf {
		return oldIsMid(rune(c), prev, rest)
	}
	p, n := byte(prev), rest[0]
	switch c {
	case '\'', '.', ':':
		if oldIsASCIILetter(p) && oldIsASCIILetter(n) {
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

func oldIsASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// oldFoldNFC case-folds and NFC-normalises. ASCII, the common case, needs
// neither tables nor allocation beyond the lowered copy.
func oldFoldNFC(text string) string {
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

func oldIsWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || 'A' <= r && r <= 'Z' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) ||
		unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Me, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.No, r) || unicode.Is(unicode.Pc, r)
}

func oldIsIdeo(r rune) bool {
	if r < 0x0e00 {
		return false
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Thai, r) || unicode.Is(unicode.Lao, r) || unicode.Is(unicode.Khmer, r) ||
		unicode.Is(unicode.Myanmar, r)
}

func oldIsFormat(r rune) bool { return r >= 0xad && unicode.Is(unicode.Cf, r) }

// oldIsMid reports whether r, found after prev inside a word, joins prev to the
// rune that follows it (UAX #29 WB6/7 and WB11/12).
func oldIsMid(r, prev rune, rest string) bool {
	next, n := utf8.DecodeRuneInString(rest)
	if n == 0 {
		return false
	}
	letter := func(c rune) bool { return unicode.IsLetter(c) && !oldIsIdeo(c) }
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

// oldBM25 is the old index over a fixed set of records' texts.
type oldBM25 struct {
	docs     []oldDoc
	post     map[string][]oldPosting // term → postings, doc order
	df       map[string]*[7]int
	totalLen [7]float64
}

type oldDoc struct {
	lens [7]int
	at   int64 // ms
}

type oldPosting struct {
	doc   int
	field int
	tf    int
}

func newOldBM25() *oldBM25 {
	return &oldBM25{post: map[string][]oldPosting{}, df: map[string]*[7]int{}}
}

// add indexes one record's seven texts.
func (x *oldBM25) add(texts [7]string, at int64) {
	id := len(x.docs)
	var d oldDoc
	d.at = at
	for f, t := range texts {
		if t == "neutral" {
			continue
		}
		toks := oldAppendTokens(nil, t)
		d.lens[f] = len(toks)
		x.totalLen[f] += float64(len(toks))
		tf := map[string]int{}
		var order []string
		for _, tok := range toks {
			if tf[tok] == 0 {
				order = append(order, tok)
			}
			tf[tok]++
		}
		for _, tok := range order {
			x.post[tok] = append(x.post[tok], oldPosting{doc: id, field: f, tf: tf[tok]})
			if x.df[tok] == nil {
				x.df[tok] = new([7]int)
			}
			x.df[tok][f]++
		}
	}
	x.docs = append(x.docs, d)
}

// search returns the ids of the best limit records for query as of asOfMs,
// as the old Recall ranked them: score, then newer, then id.
func (x *oldBM25) search(query string, limit int, asOfMs int64) []int {
	const k1, b, rw, halfLife = 1.2, 0.75, 0.1, 7 * 24 * 3600 * 1000.0
	n := float64(len(x.docs))
	seen := map[string]bool{}
	score := map[int]float64{}
	for _, t := range oldAppendTokens(nil, query) {
		if seen[t] {
			continue
		}
		seen[t] = true
		for _, p := range x.post[t] {
			df := float64(x.df[t][p.field])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			avg := x.totalLen[p.field] / n
			if avg == 0 {
				avg = 1
			}
			tf := float64(p.tf)
			fl := float64(x.docs[p.doc].lens[p.field])
			score[p.doc] += idf * tf * (k1 + 1) / (tf + k1*(1-b+b*fl/avg))
		}
	}
	type hit struct {
		id    int
		score float64
	}
	var hits []hit
	for id, s := range score {
		age := float64(max(asOfMs-x.docs[id].at, 0))
		hits = append(hits, hit{id, s + rw*math.Exp2(-age/halfLife)})
	}
	sortHits := func(a, b hit) bool {
		if a.score != b.score {
			return a.score > b.score
		}
		if x.docs[a.id].at != x.docs[b.id].at {
			return x.docs[a.id].at > x.docs[b.id].at
		}
		return a.id < b.id
	}
	sort.Slice(hits, func(i, j int) bool { return sortHits(hits[i], hits[j]) })
	var out []int
	for i := 0; i < len(hits) && i < limit; i++ {
		out = append(out, hits[i].id)
	}
	return out
}
