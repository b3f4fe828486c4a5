package cmb

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// cmbFrameOf is a cmb frame payload carrying raw as its record.
func cmbFrameOf(raw []byte) []byte {
	return append(append([]byte(`{"type":"cmb","timestamp":1,"cmb":`), raw...), '}')
}

// parsedRecord is the record ParseFrame reads from a frame carrying raw.
func parsedRecord(t *testing.T, raw []byte) *Record {
	t.Helper()
	f, err := ParseFrame(cmbFrameOf(raw))
	if err != nil {
		t.Fatalf("parse frame: %v\n%s", err, raw)
	}
	return f.(*CMBFrame).CMB
}

// randomRecord is a built record with, at random, every kind of member a
// record carries: escaped and non-ASCII texts, mood numbers, vectors,
// unknown members at every depth, lineage, an empty group, a recipient.
func randomRecord(t *testing.T, rng *rand.Rand) *Record {
	t.Helper()
	var d Draft
	for f := range d.Fields {
		d.Fields[f].Text = randomText(rng, rng.IntN(300))
	}
	if rng.IntN(2) == 0 {
		v, a := rng.Float64()*2-1, float64(rng.IntN(3)-1)
		d.Fields[Mood].Valence, d.Fields[Mood].Arousal = &v, &a
	}
	for p := rng.IntN(3); p > 0; p-- {
		d.Parents = append(d.Parents, AddressV1(&[NumFields]string{randomText(rng, 20)}, nil, ""))
	}
	d.CreatedBy, d.CreatedAt = authorID, rng.Int64N(1<<42)
	if rng.IntN(2) == 0 {
		d.To = recipientID
	}
	r, err := Build(d, testKey(t))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	switch rng.IntN(3) {
	case 0:
		r.SetGroup("")
	case 1:
		r.SetGroup("g" + randomText(rng, 8))
	}
	if rng.IntN(3) == 0 {
		r.Fields[Focus].Vector = []float64{rng.Float64(), -1e-9 * rng.Float64(), 1e22, 0}
	}
	if rng.IntN(3) == 0 {
		r.Extra = Members{{Name: "a" + randomText(rng, 4), Value: json.RawMessage(`{"x": [1, 2]}`)}, {Name: "zz", Value: json.RawMessage(`"v"`)}}
		r.FieldsExtra = Members{{Name: "extra", Value: json.RawMessage(`7`)}}
		r.Fields[Issue].Extra = Members{{Name: "note", Value: json.RawMessage(`null`)}}
		if r.Lineage != nil {
			r.Lineage.Method = "merge"
			r.Lineage.Extra = Members{{Name: "why", Value: json.RawMessage(`"x"`)}}
		}
		r.Tether = json.RawMessage(`{"t":1}`)
	}
	return r
}

// A record sent as Encode writes it keeps those bytes: Canonical returns
// them, bit for bit Encode's, and they are a copy, not the frame's buffer.
func TestParseFrameKeepsCanonicalBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		r := randomRecord(t, rng)
		want := r.Encode()
		payload, err := MarshalFrame(&CMBFrame{Timestamp: 1, CMB: r, PublicKey: "pk"})
		if err != nil {
			t.Fatal(err)
		}
		f, err := ParseFrame(payload)
		if err != nil {
			t.Fatalf("case %d: %v\n%s", i, err, payload)
		}
		got := f.(*CMBFrame).CMB
		if got.enc == nil {
			t.Fatalf("case %d: a canonical record did not keep its bytes\n%s", i, want)
		}
		if !bytes.Equal(got.Canonical(), want) || !bytes.Equal(got.Encode(), want) {
			t.Fatalf("case %d: Canonical differs from Encode\n got %s\nwant %s", i, got.Canonical(), want)
		}
		clear(payload)
		if !bytes.Equal(got.Canonical(), want) {
			t.Fatalf("case %d: Canonical shares the frame's buffer", i)
		}
	}
}

// A record whose bytes differ from Encode's in any way (member order,
// white space, escapes, number forms, repeated members, what Encode
// normalises) keeps nothing: Canonical encodes it.
func TestParseFrameNonCanonicalFallsBack(t *testing.T) {
	r := buildSample(t, func(d *Draft) { d.Parents = []string{AddressV1(&[NumFields]string{"p"}, nil, "")} })
	r.Fields[Intent].Text = "caf\u00e9 \"ok\"\n\ttab \\ end"
	r.Extra = Members{{Name: "x-a", Value: json.RawMessage(`1`)}, {Name: "x-b", Value: json.RawMessage(`[1, 2]`)}}
	canon := string(r.Encode())
	if !parsedRecordKeeps(t, canon) {
		t.Fatalf("the canonical form itself is not kept\n%s", canon)
	}
	key := r.Key
	variants := map[string]string{
		"space after colon":            strings.Replace(canon, `"key":`, `"key": `, 1),
		"space before brace":           strings.Replace(canon, `,"fields":{`, `,"fields": {`, 1),
		"newline between":              strings.Replace(canon, `,"createdBy"`, "\n,\"createdBy\"", 1),
		"members reordered":            strings.Replace(strings.Replace(canon, `"key":"`+key+`",`, ``, 1), `"sigAlg"`, `"key":"`+key+`","sigAlg"`, 1),
		"escaped letter":               strings.Replace(canon, `caf`, `c\u0061f`, 1),
		"escaped slash":                strings.Replace(canon, `tab`, `t\/ab`, 1),
		"upper-case hex escape":        strings.Replace(canon, "\u00e9", `\u00E9`, 1),
		"escaped tab as u":             strings.Replace(canon, `\t`, `\u0009`, 1),
		"escaped quote as u":           strings.Replace(canon, `\"ok`, `\u0022ok`, 1),
		"raw U+2028":                   strings.Replace(canon, `end`, "e\u2028nd", 1),
		"escaped U+FFFD":               strings.Replace(canon, `end`, `e\ufffdnd`, 1),
		"invalid UTF-8":                strings.Replace(canon, `end`, "e\xffnd", 1),
		"repeated member":              strings.Replace(canon, `,"createdBy"`, `,"createdAt":5,"createdBy"`, 1),
		"unknown members out of order": strings.Replace(strings.Replace(canon, `"x-a":1,`, ``, 1), `"x-b":[1, 2]`, `"x-b":[1, 2],"x-a":1`, 1),
		"unknown member in the middle": strings.Replace(strings.Replace(canon, `,"x-a":1`, ``, 1), `,"fields"`, `,"x-a":1,"fields"`, 1),
		"valence with trailing zero":   strings.Replace(canon, `"valence":0.4`, `"valence":0.40`, 1),
		"arousal as exponent":          strings.Replace(canon, `"arousal":-0.2`, `"arousal":-2e-1`, 1),
		"lineage field order":          strings.Replace(canon, `{"parents":`, `{"method":"merge","parents":`, 1),
	}
	for name, v := range variants {
		if v == canon {
			t.Fatalf("%s: the variant is the canonical form", name)
		}
		if !ValidJSON([]byte(v)) {
			t.Fatalf("%s: the variant is not JSON\n%s", name, v)
		}
		f, err := ParseFrame(cmbFrameOf([]byte(v)))
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		got := f.(*CMBFrame).CMB
		if got.enc != nil {
			t.Errorf("%s: a non-canonical record kept its bytes\n%s", name, v)
		}
		if !bytes.Equal(got.Canonical(), got.Encode()) {
			t.Errorf("%s: Canonical differs from Encode", name)
		}
	}
}

// parsedRecordKeeps reports whether the record raw, sent in a frame, keeps
// its bytes, and checks they are Encode's when it does.
func parsedRecordKeeps(t *testing.T, raw string) bool {
	t.Helper()
	r := parsedRecord(t, []byte(raw))
	if r.enc != nil && !bytes.Equal(r.enc, r.Encode()) {
		t.Fatalf("kept bytes differ from Encode\n got %s\nwant %s", r.enc, r.Encode())
	}
	return r.enc != nil
}

// Changing a parsed record drops its bytes: Sign, SetGroup, and a Clone.
func TestCanonicalAfterChange(t *testing.T) {
	r0 := buildSample(t, nil)
	raw := r0.Encode()
	r := parsedRecord(t, raw)
	if r.Clone().enc != nil {
		t.Fatal("a clone kept the original's bytes")
	}
	r.SetGroup("other")
	if r.enc != nil || bytes.Equal(r.Canonical(), raw) || !bytes.Equal(r.Canonical(), r.Encode()) {
		t.Fatal("SetGroup kept the old bytes")
	}
	r = parsedRecord(t, raw)
	if err := r.Sign(testKey(t)); err != nil {
		t.Fatal(err)
	}
	if r.enc != nil {
		t.Fatal("Sign kept the old bytes")
	}
}

// plainString is exactly "appendString writes s as it is", for strings
// without control characters; with them, cutString still compares the
// encoding.
func TestPlainString(t *testing.T) {
	pieces := []string{"a", "é", "\"", "\\", "\u2028", "\u2029", "\u2027", "\u202a", "\xe2", "\xe2\x80", "\xff", "\ufffd", "日本", "🙂", "/", "<&>", " "}
	rng := rand.New(rand.NewPCG(5, 6))
	check := func(s string) {
		t.Helper()
		want := string(appendString(nil, s)) == `"`+s+`"`
		if got := plainString(s); got != want {
			t.Fatalf("plainString(%q) = %v, want %v", s, got, want)
		}
	}
	check("")
	for _, s := range []string{"a\nb", "a\x00", "\x1f\"\t"} {
		d := appendString(nil, s)
		if rest, ok := cutString(append(d, '}'), s); !ok || string(rest) != "}" {
			t.Fatalf("cutString(%q) = %q, %v", s, rest, ok)
		}
	}
	for range 5000 {
		var b strings.Builder
		for n := rng.IntN(12); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		check(b.String())
	}
}

// ValidJSON's eight-bytes-at-a-time step agrees with encoding/json for a
// byte of every kind at every offset of a long string.
func TestValidJSONLongStrings(t *testing.T) {
	specials := []string{`"`, `\`, `\"`, `\\`, `\n`, `\u00e9`, `\u00g9`, `\x`, "\x00", "\x01", "\x1f", " ", "\x7f", "\x80", "\xff", "é", "!", "#", "[", "]", "\\u12"}
	for n := 0; n < 40; n++ {
		for p := 0; p <= n; p++ {
			for _, c := range specials {
				body := strings.Repeat("a", p) + c + strings.Repeat("b", n-p)
				run := strings.Repeat("a", p) + strings.Repeat(c, 1+n%5) + `\n` + strings.Repeat("b", n-p)
				for _, doc := range []string{`"` + body + `"`, `{"k":"` + body + `","z":1}`, `"` + body, `"` + run + `"`, `"` + run} {
					if got, want := ValidJSON([]byte(doc)), json.Valid([]byte(doc)); got != want {
						t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", doc, got, want)
					}
				}
			}
		}
	}
}

// What validation noted of where values end is where scanning finds them,
// and a frame's record decodes with it as without.
func TestValueEnds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 100 {
		r := randomRecord(t, rng)
		payload, err := MarshalFrame(&CMBFrame{Timestamp: 1, CMB: r, PublicKey: "pk"})
		if err != nil {
			t.Fatal(err)
		}
		// White space inside, so ends are not only what Encode writes.
		if i%2 == 1 {
			payload = bytes.ReplaceAll(payload, []byte(`":{`), []byte(`": {`))
		}
		var ends valueEnds
		if !validJSON(payload, &ends) {
			t.Fatalf("case %d: not valid\n%s", i, payload)
		}
		if ends.n == 0 {
			t.Fatalf("case %d: no value ends noted", i)
		}
		found := 0
		for j, c := range payload {
			if c != '{' && c != '[' {
				continue
			}
			if e, ok := ends.end(payload, j); ok {
				found++
				if want := skipValue(payload, j, nil); e != want {
					t.Fatalf("case %d: value at %d ends at %d, noted %d", i, j, want, e)
				}
			}
		}
		if found != ends.n {
			t.Fatalf("case %d: %d of %d noted ends found", i, found, ends.n)
		}
		raw := payload[bytes.Index(payload, []byte(`"cmb":`))+6:]
		raw = raw[skipSpace(raw, 0):]
		raw = raw[:skipValue(raw, 0, nil)]
		got, err := decodeValid(raw, false, &ends)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Encode(), want.Encode()) || !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: decoded with noted ends differs", i)
		}
	}
}
