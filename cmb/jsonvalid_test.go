package cmb

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// validJSONCases are edge cases of JSON's grammar, valid and not.
var validJSONCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, "\t[\n]\r", `{`, `}`, `[`, `]`, `{]`, `[}`,
	`{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`,
	`[1,2,3]`, `[1,,2]`, `[1,]`, `[,1]`, `[1 2]`, `{"a":[{"b":[]}],"c":{}}`,
	`"x"`, `"`, `"abc`, `"a\"b"`, `"a\\"`, `"a\\\"`, `"\/\b\f\n\r\t"`, `"\a"`, `"\u00e9"`,
	`"\u00g9"`, `"\u12"`, `"\u123"`, `"\uD800"`, "\"a\x01b\"", "\"a\x1fb\"", "\"a\x7fb\"",
	"\"\xff\xfe\"", "\"é\"", `0`, `-0`, `01`, `-01`, `1.`, `.1`, `1.5`, `-1.5e10`, `1e`, `1e+`,
	`1E-2`, `1e+2`, `-`, `+1`, `0x1`, `1.2.3`, `1e2e3`, `true`, `false`, `null`, `tru`, `truex`,
	`nul`, `nulll`, `True`, `NaN`, `Infinity`, `{"a":true,"b":false,"c":null}`, `[true false]`,
	`{} {}`, `1 2`, `"a" "b"`, `{"a":1}x`, "{\"a\":1}\x00", `{"":""}`, `{"a":"b":"c"}`,
	`[[[[[]]]]]`, `[[[[[]]]]`, `{"a":{"b":{"c":1}}}}`, "\u00a0{}", "{}\u00a0",
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := ValidJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", s, got, want)
		}
	}
	for _, s := range validJSONCases {
		check(s)
	}
	// Around the nesting limit.
	for _, n := range []int{maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		check(strings.Repeat("[", n) + strings.Repeat("]", n))
		check(strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1))
	}
	// Every byte changed, dropped or doubled in a request line and a
	// frame-like document: most mutants are invalid, each at a place of
	// its own.
	docs := []string{
		`{"type":"remember","id":7,"fields":{"focus":{"text":"a \"quoted\" word\n","vector":[0.5,-1e-3,2E+4]},"mood":{"text":"é","valence":-0.25,"arousal":1}},"parents":[{"key":"k"}],"to":null,"x":[true,false,{}]}`,
		` [ {"a" : [ 1 , 2.50 , -0 ] , "b\u00e9\\" : { } } , "" , null ] `,
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[]:,"\ -+.0123456789eEtrufalsn` + "\x00\x1f\x7f\xff ")
	for _, d := range docs {
		check(d)
		for i := range len(d) {
			check(d[:i] + d[i+1:])
			check(d[:i] + d[i:i+1] + d[i:])
			for range 4 {
				check(d[:i] + string(alphabet[r.IntN(len(alphabet))]) + d[i+1:])
			}
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range validJSONCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidJSON(b), json.Valid(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	line := []byte(`{"type":"remember","id":1,"fields":{` + strings.Repeat(`"focus":{"text":"`+strings.Repeat("word ", 60)+`"},`, 7) + `"mood":{"text":"calm"}}}`)
	b.Run("ValidJSON", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if !ValidJSON(line) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if !json.Valid(line) {
				b.Fatal("invalid")
			}
		}
	})
}
