package cmb

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// sameJSON compares two documents as JSON values.
func sameJSON(t *testing.T, a, b []byte) {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("left is not JSON: %v\n%s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("right is not JSON: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("JSON differs\n got %s\nwant %s", b, a)
	}
}

func TestDecodeKeepsUnknownMembersAtEveryDepth(t *testing.T) {
	in := []byte(`{"key":"cmb1-567e99d3f443ee0e0867ac2c7b8e0de9d2331daaf42cc8364bcc34dfc423b1cf","createdBy":"vector-author","createdAt":1751000000000,"group":"conformance-group","to":"",
	"fields":{"focus":{"text":"testing conformance vectors","vector":[0.5,-1e-7],"x-hint":{"a":[1,2]}},"issue":{"text":"none"},"intent":{"text":"verify implementations agree"},"motivation":{"text":"interop"},"commitment":{"text":"exact bytes"},"perspective":{"text":"generator"},"mood":{"text":"neutral","valence":0,"arousal":-0.25,"color":"blue"},"x-eighth":{"text":"ignored"}},
	"lineage":null,"sig":"ujqyB4JQAkWE0ReOuyZCL7Y924Sjqth70roknm-S-Ho9NyFjQmHqoKuaFGS-yiU78xp_GLtDUbGzdEFs-Mu3AA","sigAlg":"ed25519",
	"tether":{"of":"x","drift":0.5},"meta":{"tags":["a"]},"payload":null,"zzz":true}`)
	r, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, in, r.Encode())
	if v, ok := r.Extra.Get("meta"); !ok || string(v) != `{"tags":["a"]}` {
		t.Fatalf("top-level unknown member lost: %s", v)
	}
	if v, ok := r.Fields[Mood].Extra.Get("color"); !ok || string(v) != `"blue"` {
		t.Fatalf("field-level unknown member lost")
	}
	if r.HasGroup() != true || r.Group != "conformance-group" {
		t.Fatal("group lost")
	}
	// The unknown eighth field is not one of the seven and does not enter the address.
	if err := r.VerifyAddress(); err != nil {
		t.Fatalf("unknown members changed the address: %v", err)
	}
	lin := []byte(`{"key":"cmb1-0589f6578ea061c37247e7ea3866e460508f75958dc295e489aa06079d9146b6","createdBy":"receiver-node","createdAt":1,"fields":{"focus":{"text":"testing conformance vectors"},"issue":{"text":"none"},"intent":{"text":"verify implementations agree"},"motivation":{"text":"interop"},"commitment":{"text":"exact bytes"},"perspective":{"text":"generator"},"mood":{"text":"neutral"}},"lineage":{"parents":["cmb1-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","cmb1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],"method":"","depth":2},"_e2e":{"nonce":"n","v":1}}`)
	r2, err := Decode(lin)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, lin, r2.Encode())
	if err := r2.VerifyAddress(); err != nil {
		t.Fatalf("remix vector decoded from JSON: %v", err)
	}
}

func TestDecodeIsStrictAboutKnownTypes(t *testing.T) {
	good := string(buildSample(t, nil).Encode())
	cases := map[string]string{
		"not an object":        `[1,2]`,
		"null":                 `null`,
		"createdAt string":     strings.Replace(good, `"createdAt":1751000000123`, `"createdAt":"1751000000123"`, 1),
		"createdAt fraction":   strings.Replace(good, `"createdAt":1751000000123`, `"createdAt":1751000000123.5`, 1),
		"key number":           strings.Replace(good, `"key":"`, `"key":7,"x":"`, 1),
		"group null":           strings.Replace(good, `"group":"alpha"`, `"group":null`, 1),
		"text number":          strings.Replace(good, `"focus":{"text":"deploy the parser"}`, `"focus":{"text":12}`, 1),
		"field missing":        strings.Replace(good, `"focus":{"text":"deploy the parser"},`, ``, 1),
		"field as string":      strings.Replace(good, `"focus":{"text":"deploy the parser"}`, `"focus":"deploy the parser"`, 1),
		"valence out of range": strings.Replace(good, `"valence":0.4`, `"valence":1.4`, 1),
		"valence string":       strings.Replace(good, `"valence":0.4`, `"valence":"0.4"`, 1),
		"parents not strings":  strings.Replace(good, `"sig":`, `"lineage":{"parents":[1]},"sig":`, 1),
		"lineage array":        strings.Replace(good, `"sig":`, `"lineage":[],"sig":`, 1),
		"vector of strings":    strings.Replace(good, `"focus":{"text":"deploy the parser"}`, `"focus":{"text":"x","vector":["a"]}`, 1),
		"sealed without nonce": strings.Replace(good, good[strings.Index(good, `"fields":`):strings.Index(good, `,"sig"`)], `"fields":"AAAA"`, 1),
		"missing key":          strings.Replace(good, `"key":`, `"kee":`, 1),
		"truncated":            good[:len(good)/2],
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if in == good {
				t.Fatal("test case did not change the input")
			}
			_, err := Decode([]byte(in))
			if !errorIs(err, ErrBadRecord) {
				t.Fatalf("err = %v, want bad-record", err)
			}
		})
	}
}

func TestDecodeDraftReadsWhatAuthorsWrite(t *testing.T) {
	// Vector case 3: strings for objects, "" and a left-out field are neutral.
	in := `{"fields":{"focus":"testing conformance vectors","issue":"","intent":{"text":"verify implementations agree"},"motivation":null,"commitment":"exact bytes","mood":{"text":"","valence":0.5,"tone":"dry"},"x-eighth":"kept"}}`
	r, err := DecodeDraft([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != "" || r.CreatedBy != "" || r.CreatedAt != 0 {
		t.Fatalf("absent members not left zero: %+v", r)
	}
	want := [NumFields]string{"testing conformance vectors", Neutral, "verify implementations agree", Neutral, "exact bytes", Neutral, Neutral}
	if got := r.Fields.Texts(); got != want {
		t.Fatalf("texts = %q, want %q", got, want)
	}
	if v := r.Fields[Mood].Valence; v == nil || *v != 0.5 {
		t.Fatalf("mood valence lost: %v", v)
	}
	if _, ok := r.Fields[Mood].Extra.Get("tone"); !ok {
		t.Fatal("unknown field member not returned")
	}
	if _, ok := r.FieldsExtra.Get("x-eighth"); !ok {
		t.Fatal("unknown field name not returned")
	}
	sealed, err := DecodeDraft([]byte(`{"fields":"AAAA","_e2e":{"nonce":"n"}}`))
	if err != nil || sealed.Sealed != "AAAA" {
		t.Fatalf("sealed draft: %v %+v", err, sealed)
	}
	for _, bad := range []string{`{}`, `{"fields":7}`, `{"fields":{"focus":7}}`, `{"fields":{"focus":{"txt":"x"}}}`, `{"fields":{"mood":{"text":"x","valence":3}}}`} {
		if _, err := DecodeDraft([]byte(bad)); !errorIs(err, ErrBadRecord) {
			t.Errorf("%s: err = %v, want bad-record", bad, err)
		}
	}
}

// randomText makes text that needs NFC about half the time, up to n bytes.
func randomText(rng *rand.Rand, n int) string {
	pieces := []string{"a", "é", "e\u0301", "Å", "A\u030a", "한", "\u1100\u1161", "ﬁ", "x y", "\"q\"", "\\", "\n", "\u2028", "日本", "🙂", "|", "3:", "neutral"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	s := b.String()
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

func TestPropertySignEncodeDecodeVerify(t *testing.T) {
	priv := testKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 150
	for i := 0; i < n; i++ {
		var d Draft
		for f := range d.Fields {
			size := rng.IntN(200)
			if i%10 == 0 {
				size = 60 << 10 // 60 KB texts
			}
			if rng.IntN(8) == 0 {
				size = 0 // becomes "neutral"
			}
			d.Fields[f].Text = randomText(rng, size)
		}
		if rng.IntN(2) == 0 {
			v := rng.Float64()*2 - 1
			d.Fields[Mood].Valence = &v
		}
		for p := rng.IntN(6); p > 0; p-- {
			d.Parents = append(d.Parents, AddressV1(&[NumFields]string{randomText(rng, 20)}, nil, ""))
		}
		d.Group = "g" + string(rune('a'+rng.IntN(26)))
		d.CreatedBy = authorID
		d.CreatedAt = rng.Int64N(1 << 42)
		self := otherID
		if rng.IntN(2) == 0 {
			d.To, self = recipientID, recipientID
		}
		r, err := Build(d, priv)
		if err != nil {
			t.Fatalf("case %d: build: %v", i, err)
		}
		for f := range r.Fields {
			if !norm.NFC.IsNormalString(r.Fields[f].Text) {
				t.Fatalf("case %d: built text not NFC", i)
			}
		}
		// Shuffle the parents: the address binds the set, not the order.
		if len(d.Parents) > 1 {
			rng.Shuffle(len(r.Lineage.Parents), func(a, b int) {
				r.Lineage.Parents[a], r.Lineage.Parents[b] = r.Lineage.Parents[b], r.Lineage.Parents[a]
			})
		}
		wire := r.Encode()
		got, err := Decode(wire)
		if err != nil {
			t.Fatalf("case %d: decode: %v", i, err)
		}
		if !bytes.Equal(got.Encode(), wire) {
			t.Fatalf("case %d: re-encoding differs", i)
		}
		policy := Policy{Audience: Audience{Group: d.Group, Self: self}, AuthorKey: pub}
		if err := got.Verify(policy); err != nil {
			t.Fatalf("case %d: verify: %v", i, err)
		}
		if i%15 == 7 {
			checkEveryByteFlipCaught(t, wire, policy)
		}
	}
}

// checkEveryByteFlipCaught changes each byte of every signed member's value
// (key, createdBy, createdAt, group, to, field texts, parents) and expects
// the record to be refused, by decode or by verify.
func checkEveryByteFlipCaught(t *testing.T, wire []byte, policy Policy) {
	t.Helper()
	r, _ := Decode(wire)
	var spans [][2]int
	add := func(member string) {
		i := bytes.Index(wire, []byte(member))
		if i < 0 {
			return
		}
		start := i + len(member)
		end := start
		if wire[start] == '"' {
			end = start + 1
			for wire[end] != '"' {
				if wire[end] == '\\' {
					end++
				}
				end++
			}
			start++
		} else {
			for end < len(wire) && wire[end] >= '0' && wire[end] <= '9' {
				end++
			}
		}
		spans = append(spans, [2]int{start, min(end, start+64)})
	}
	add(`"key":`)
	add(`"createdBy":`)
	add(`"createdAt":`)
	add(`"group":`)
	add(`"to":`)
	for _, name := range FieldNames {
		add(`"` + name + `":{"text":`)
	}
	if r.IsRemix() {
		add(`"parents":[`)
	}
	mutated := make([]byte, len(wire))
	for _, sp := range spans {
		for pos := sp[0]; pos < sp[1]; pos++ {
			for _, delta := range []byte{1, 0x20} {
				copy(mutated, wire)
				mutated[pos] ^= delta
				m, err := Decode(mutated)
				if err != nil {
					continue
				}
				if err := m.Verify(policy); err == nil {
					// An NFC-equivalent rewrite or a case flip in `to` (nodeIds are
					// case-insensitive, but `to` is signed verbatim) would be the
					// only acceptable survivors; neither can come from a bit flip.
					t.Fatalf("flip of byte %d (%q) in %q accepted", pos, wire[pos], wire[sp[0]:sp[1]])
				}
			}
		}
	}
}
