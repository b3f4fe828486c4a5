package store

import (
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
	var out []string
	tokenize(text, func(t string) { out = append(out, t) })
	return out
}

func tokenize(text string, emit func(string)) {
	if text == "" {
		return
	}
	s := foldNFC(text)
	start := -1
	var prev rune
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			// ASCII: the same decisions as below without decoding, table
			// lookups or the checks that only non-ASCII runes can pass.
			r := rune(c)
			switch {
			case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || 'A' <= c && c <= 'Z':
				if start < 0 {
					start = i
				}
			case start >= 0 && (c == '\'' || c == '.' || c == ':' || c == ',' || c == ';') && isMid(r, prev, s[i+1:]):
			default:
				if start >= 0 {
					emit(s[start:i])
					start = -1
				}
			}
			prev = r
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case isIdeo(r):
			if start >= 0 {
				emit(s[start:i])
				start = -1
			}
			emit(s[i : i+n])
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
				emit(s[start:i])
				start = -1
			}
		}
		prev = r
		i += n
	}
	if start >= 0 {
		emit(s[start:])
	}
}

// foldNFC case-folds and NFC-normalises. ASCII, the common case, needs
// neither tables nor allocation beyond the lowered copy.
func foldNFC(text string) string {
	ascii, upper := true, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c >= utf8.RuneSelf {
			ascii = false
			break
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
	lens  [NumFields]uint32
	terms []fieldTerm
}

type fieldTerm struct {
	term  string
	field uint8
	tf    uint32
}

const neutralText = "neutral"

func analyze(texts [NumFields]string) docTerms {
	var d docTerms
	d.terms = make([]fieldTerm, 0, 16*NumFields)
	var counts map[string]int // term → index in d.terms, for long fields only
	for f, t := range texts {
		if t == neutralText {
			// The protocol's placeholder for an unfilled field says nothing
			// about the record and would only dilute the field's statistics.
			continue
		}
		first := len(d.terms)
		if counts != nil {
			clear(counts)
		}
		tokenize(t, func(tok string) {
			d.lens[f]++
			// Fields are short: a scan over this field's distinct terms is
			// cheaper than a map until there are dozens of them.
			if counts == nil && len(d.terms)-first <= 32 {
				for i := first; i < len(d.terms); i++ {
					if d.terms[i].term == tok {
						d.terms[i].tf++
						return
					}
				}
			} else {
				if counts == nil {
					counts = make(map[string]int, 64)
				}
				if len(counts) == 0 {
					for i := first; i < len(d.terms); i++ {
						counts[d.terms[i].term] = i
					}
				}
				if i, ok := counts[tok]; ok {
					d.terms[i].tf++
					return
				}
				counts[tok] = len(d.terms)
			}
			d.terms = append(d.terms, fieldTerm{term: tok, field: uint8(f), tf: 1})
		})
	}
	return d
}
