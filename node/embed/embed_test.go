package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/cmbnode/cmbnode/internal/benchtext"
)

// fakeServer answers /v1/embeddings with vector i = (len(text), i+1, 0…),
// in reverse order of index, so the client must place them by index.
func fakeServer(t *testing.T, dim int, hook func(w http.ResponseWriter, n int64) bool) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
			http.Error(w, "wrong path", http.StatusNotFound)
			return
		}
		if hook != nil && hook(w, n) {
			return
		}
		var req embedRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "m" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		type datum struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []datum `json:"data"`
		}
		for i := len(req.Input) - 1; i >= 0; i-- {
			v := make([]float32, dim)
			v[0], v[1] = float32(len(req.Input[i])), 3
			out.Data = append(out.Data, datum{Index: i, Embedding: v})
		}
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func newHTTP(t *testing.T, url string, o HTTPOptions) *HTTP {
	t.Helper()
	o.URL, o.Model, o.Dim = url+"/v1", "m", 4
	h, err := NewHTTP(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHTTPBatchesAndNormalises: 5 texts at batch size 2 take 3 requests,
// come back in input order (the server answers out of order), unit length.
func TestHTTPBatchesAndNormalises(t *testing.T) {
	srv, calls := fakeServer(t, 4, nil)
	h := newHTTP(t, srv.URL, HTTPOptions{BatchSize: 2})
	texts := []string{"a", "bb", "cccc", "x", "yyyy"}
	vs, err := h.Encode(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || len(vs) != 5 {
		t.Fatalf("%d requests, %d vectors; want 3 and 5", calls.Load(), len(vs))
	}
	for i, v := range vs {
		l := float64(len(texts[i]))
		if n := Dot(v, v); n < 0.9999 || n > 1.0001 {
			t.Fatalf("vector %d has squared norm %v", i, n)
		}
		if got, want := float64(v[1]/v[0]), 3/l; got-want > 1e-5 || want-got > 1e-5 {
			t.Fatalf("vector %d is not text %d's (ratio %v, want %v)", i, i, got, want)
		}
	}
	if k := h.Kernel(); k.ID != "m-d4" || k.Fingerprint != "m/4/l2" || k.Dim != 4 {
		t.Fatalf("kernel %+v", k)
	}
}

// TestHTTPRetriesTransient: a 503 is retried, a 400 is not.
func TestHTTPRetriesTransient(t *testing.T) {
	srv, calls := fakeServer(t, 4, func(w http.ResponseWriter, n int64) bool {
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	h := newHTTP(t, srv.URL, HTTPOptions{Backoff: time.Millisecond})
	if _, err := h.Encode(context.Background(), []string{"a"}); err != nil || calls.Load() != 2 {
		t.Fatalf("err %v after %d calls; want success on the second", err, calls.Load())
	}
	srv2, calls2 := fakeServer(t, 4, func(w http.ResponseWriter, n int64) bool {
		http.Error(w, "no", http.StatusBadRequest)
		return true
	})
	h = newHTTP(t, srv2.URL, HTTPOptions{Backoff: time.Millisecond})
	if _, err := h.Encode(context.Background(), []string{"a"}); !errors.Is(err, ErrEncoder) || calls2.Load() != 1 {
		t.Fatalf("err %v after %d calls; want ErrEncoder after 1", err, calls2.Load())
	}
}

// TestHTTPBounds: a slow server times out, an oversized or wrong-sized
// answer is refused.
func TestHTTPBounds(t *testing.T) {
	release := make(chan struct{})
	slow, _ := fakeServer(t, 4, func(w http.ResponseWriter, n int64) bool {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return false
	})
	defer close(release)
	h := newHTTP(t, slow.URL, HTTPOptions{Timeout: 50 * time.Millisecond, Retries: -1})
	start := time.Now()
	if _, err := h.Encode(context.Background(), []string{"a"}); !errors.Is(err, ErrEncoder) {
		t.Fatalf("slow server: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("the timeout did not bound the request: %v", el)
	}

	huge, _ := fakeServer(t, 4, func(w http.ResponseWriter, n int64) bool {
		w.Write([]byte(`{"data":[{"index":0,"embedding":[` + strings.Repeat("1,", 1<<20) + `1]}]}`))
		return true
	})
	h = newHTTP(t, huge.URL, HTTPOptions{Retries: -1})
	if _, err := h.Encode(context.Background(), []string{"a"}); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("oversized response: %v", err)
	}

	wrong, _ := fakeServer(t, 3, nil)
	h = newHTTP(t, wrong.URL, HTTPOptions{})
	if _, err := h.Encode(context.Background(), []string{"a"}); err == nil || !strings.Contains(err.Error(), "dimensions") {
		t.Fatalf("wrong dimension: %v", err)
	}
}

func TestNewHTTPRefuses(t *testing.T) {
	for _, o := range []HTTPOptions{
		{URL: "ftp://x", Model: "m", Dim: 4},
		{URL: "http://x", Model: "", Dim: 4},
		{URL: "http://x", Model: "m", Dim: 0},
	} {
		if _, err := NewHTTP(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestHashed: deterministic, unit length, a near-copy close and an
// unrelated text far, and the kernel's names valid.
func TestHashed(t *testing.T) {
	h := DefaultHashed()
	if err := CheckKernel(h.Kernel()); err != nil {
		t.Fatal(err)
	}
	a := h.Vector("The release ships on Friday after the freeze.")
	b := h.Vector("the release ships on friday, after the freeze")
	c := h.Vector("Grace adopted a grey kitten named Pixel.")
	if Dot(a, h.Vector("The release ships on Friday after the freeze.")) < 0.99999 {
		t.Fatal("not deterministic")
	}
	if s := Dot(a, b); s < 0.95 {
		t.Fatalf("near-copy cosine %v, want ≥ 0.95", s)
	}
	if s := Dot(a, c); s > 0.4 {
		t.Fatalf("unrelated cosine %v, want ≤ 0.4", s)
	}
	if z := h.Vector("  ,,, "); Dot(z, z) != 0 {
		t.Fatal("a text with no word has a vector")
	}
}

// TestHashedMatchesStringHashing: Vector gives, bucket for bucket, the
// vectors of hashing each n-gram as a string with hash/fnv, which is what
// earlier releases stored beside records and what peers compute.
func TestHashedMatchesStringHashing(t *testing.T) {
	h := DefaultHashed()
	for _, text := range []string{
		"The release ships on Friday after the freeze.",
		"a", "ab", "  ,,, ", "", "x1 y2 z3",
		"Ünïcödé wörds, ÇA VA? naïve café",
		"日本語のテキスト と 漢字 123",
		"emoji 🙂 between words🙂here",
		"ASCII: MiXeD case, digits 42x7, punct.-_/'\"[]{}~^`@ end",
		"\x00\x01\x7f tabs\tand\nnewlines\r\n",
		strings.Repeat("averyveryverylongwordthatrunsonandon", 5) + " then short",
		strings.Repeat("x", 62) + " " + strings.Repeat("y", 63) + " " + strings.Repeat("z", 64),
	} {
		want := hashedByString(h, text)
		got := h.Vector(text)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%q: bucket %d is %v, hashing strings gives %v", text, i, got[i], want[i])
			}
		}
	}
	// Random ASCII (letters, digits, separators) through the default
	// kernel's streamed trigrams and the general path of other kernels.
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aAbBzZ09 ,.-_'\t\n\x00\x7f"
	for _, k := range []Hashed{h, {N: 2, Dim: 512}, {N: 4, Dim: 300}, {N: 3, Dim: 100}} {
		for range 300 {
			b := make([]byte, r.IntN(40))
			for i := range b {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			text := string(b)
			want := hashedByString(k, text)
			got := k.Vector(text)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("kernel %+v, %q: bucket %d is %v, hashing strings gives %v", k, text, i, got[i], want[i])
				}
			}
		}
	}
}

// hashedByString is the kernel written the plain way: an fnv hasher and a
// string per n-gram.
func hashedByString(h Hashed, text string) []float32 {
	v := make([]float32, h.Dim)
	text = strings.ToLower(norm.NFC.String(text))
	var word []rune
	flush := func() {
		if len(word) == 0 {
			return
		}
		g := append(append([]rune{'\x02'}, word...), '\x03')
		n := min(h.N, len(g))
		for i := 0; i+n <= len(g); i++ {
			f := fnv.New64a()
			f.Write([]byte(string(g[i : i+n])))
			x := f.Sum64()
			b := int(x % uint64(h.Dim))
			if x>>63 == 1 {
				v[b]--
			} else {
				v[b]++
			}
		}
		word = word[:0]
	}
	for _, r := range text {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			word = append(word, r)
			continue
		}
		flush()
	}
	flush()
	Normalize(v)
	return v
}

// benchFields is 64 fields of 300 bytes as a standard record's are
// (Zipf-distributed made-up words, ASCII).
func benchFields() []string {
	r := mrand.New(mrand.NewSource(1))
	vocab := benchtext.Vocab(r, 4096)
	z := mrand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	texts := make([]string, 64)
	for i := range texts {
		texts[i] = benchtext.Field(fmt.Sprintf("focus %d:", i), 300, vocab, z)
	}
	return texts
}

// BenchmarkHashedCounts is the default kernel's counts of one 300-byte
// field of a standard record (Zipf-distributed made-up words, ASCII).
func BenchmarkHashedCounts(b *testing.B) {
	texts := benchFields()
	h := DefaultHashed()
	c := make([]int32, h.Dim)
	b.SetBytes(300)
	for i := 0; b.Loop(); i++ {
		h.Counts(texts[i%len(texts)], c)
	}
}

// BenchmarkHashedCountsWords is BenchmarkHashedCounts keeping the words'
// hashes too (CountsWords), as SVAF counts an incoming record's fields.
func BenchmarkHashedCountsWords(b *testing.B) {
	texts := benchFields()
	h := DefaultHashed()
	c := make([]int32, h.Dim)
	var words []uint64
	touched := make([]uint64, (h.Dim+63)/64)
	b.SetBytes(300)
	for i := 0; b.Loop(); i++ {
		words = h.CountsWords(texts[i%len(texts)], c, touched, words[:0])
	}
}

// TestAppendWords: a text's word hashes are its words', as Counts reads
// words, whatever the case, punctuation and spacing, and an ASCII word
// hashes alike in an ASCII text and in one that is not.
func TestAppendWords(t *testing.T) {
	h := DefaultHashed()
	words := func(s string) []uint64 { return h.AppendWords(nil, s) }
	base := words("Parser ships friday 42")
	for _, s := range []string{"parser, ships; FRIDAY 42.", "  parser\tships\nfriday...42 ", "-parser-ships-friday-42-"} {
		if got := words(s); !slices.Equal(got, base) {
			t.Errorf("%q: %x, want %x", s, got, base)
		}
	}
	if got := words("parser ships café friday 42"); len(got) != 5 || !slices.Equal(got[:2], base[:2]) || !slices.Equal(got[3:], base[2:]) {
		t.Errorf("non-ASCII text: %x, want %x around café's", got, base)
	}
	if got := words("parser ship friday 42"); slices.Equal(got, base) {
		t.Error("another word hashes alike")
	}
	if got := words(" ,;. "); len(got) != 0 {
		t.Errorf("no word: %x", got)
	}
}

// TestCountsWords: the one pass gives Counts's counts and AppendWords's
// hashes, appended after what words held, for ASCII and other texts, in
// the default kernel and ones the pass does not stream; it and
// CountsTouched mark every bucket whose count changed, and leave the
// bits already set.
func TestCountsWords(t *testing.T) {
	texts := []string{"Parser ships friday 42", "  a, bb; CCC.\tdddd ", "x", " ,;. ", "", "parser ships café friday 42", "Zürich-Bern 3",
		strings.Repeat("ab ", 70) + "cd", "an ASCII text of more than eight bytes, then é", "eight b\xff"}
	for _, h := range []Hashed{DefaultHashed(), {N: 2, Dim: 100}, {N: 3, Dim: 64}} {
		n := (h.Dim + 63) / 64
		for _, s := range texts {
			want, got, got2 := make([]int32, h.Dim), make([]int32, h.Dim), make([]int32, h.Dim)
			want[7], got[7], got2[7] = 5, 5, 5 // counts are added to
			h.Counts(s, want)
			touched, touched2 := make([]uint64, n), make([]uint64, n)
			touched[n-1], touched2[n-1] = 1<<2, 1<<2 // bits are set, not cleared
			words := h.CountsWords(s, got, touched, []uint64{1})
			h.CountsTouched(s, got2, touched2)
			if !slices.Equal(got, want) || !slices.Equal(got2, want) {
				t.Errorf("%v %q: counts differ", h, s)
			}
			if w := append([]uint64{1}, h.AppendWords(nil, s)...); !slices.Equal(words, w) {
				t.Errorf("%v %q: words %x, want %x", h, s, words, w)
			}
			for _, tb := range [][]uint64{touched, touched2} {
				if tb[n-1]&(1<<2) == 0 {
					t.Errorf("%v %q: a bit set before is cleared", h, s)
				}
				for b := range h.Dim {
					changed := want[b] != 0
					if b == 7 {
						changed = want[b] != 5
					}
					if changed && tb[b/64]&(1<<(b%64)) == 0 {
						t.Errorf("%v %q: bucket %d changed, not marked", h, s, b)
					}
				}
				if extra := tb[n-1] >> (h.Dim % 64); h.Dim%64 != 0 && extra != 0 {
					t.Errorf("%v %q: bits past Dim set: %x", h, s, extra)
				}
			}
		}
	}
}

// TestIsASCII: isASCII finds a byte of the upper half wherever it is.
func TestIsASCII(t *testing.T) {
	for n := range 20 {
		b := []byte(strings.Repeat("a", n))
		if !isASCII(string(b)) {
			t.Fatalf("%d ASCII bytes: not ASCII", n)
		}
		for i := range b {
			for _, c := range []byte{0x80, 0xff, 0xc3} {
				b[i] = c
				if isASCII(string(b)) {
					t.Fatalf("%q: ASCII", b)
				}
				b[i] = 'a'
			}
		}
	}
}

// TestCountsWordsRandom: on random ASCII texts, of letters, digits and
// the bytes between words, in runs and alone, at either end or not,
// CountsWords's streamed pass gives Counts's counts and AppendWords's
// words, and marks exactly CountsTouched's buckets.
func TestCountsWordsRandom(t *testing.T) {
	r := mrand.New(mrand.NewSource(3))
	const alphabet = "abcXYZ019 ,.\t-_\x7f\x00"
	for _, h := range []Hashed{DefaultHashed(), {N: 3, Dim: 64}, {N: 3, Dim: 1}} {
		n := (h.Dim + 63) / 64
		for trial := range 2000 {
			b := make([]byte, r.Intn(40))
			for i := range b {
				b[i] = alphabet[r.Intn(len(alphabet))]
			}
			s := string(b)
			want, got, got2 := make([]int32, h.Dim), make([]int32, h.Dim), make([]int32, h.Dim)
			h.Counts(s, want)
			touched, touched2 := make([]uint64, n), make([]uint64, n)
			words := h.CountsWords(s, got, touched, []uint64{uint64(trial)})
			h.CountsTouched(s, got2, touched2)
			if !slices.Equal(got, want) || !slices.Equal(touched, touched2) {
				t.Fatalf("%v %q: counts %v, touched %x; want %v, %x", h, s, got, touched, want, touched2)
			}
			if w := h.AppendWords([]uint64{uint64(trial)}, s); !slices.Equal(words, w) {
				t.Fatalf("%v %q: words %x, want %x", h, s, words, w)
			}
		}
	}
}
