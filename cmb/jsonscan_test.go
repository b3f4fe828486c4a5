package cmb

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// parseFrameByUnmarshal is ParseFrame of a cmb frame the plain way: the
// type, then the frame by json.Unmarshal (the record by its UnmarshalJSON).
func parseFrameByUnmarshal(payload []byte) (Frame, error) {
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(payload, &head); err != nil || head.Type == nil || *head.Type != TypeCMB {
		return nil, errors.New("not a cmb frame")
	}
	f := &CMBFrame{}
	if err := json.Unmarshal(payload, f); err != nil {
		return nil, err
	}
	if f.CMB == nil {
		return nil, errors.New("no cmb")
	}
	return f, nil
}

// sameAsUnmarshal fails t unless ParseFrame and the plain way agree on
// payload: both refuse it, or both give a frame that encodes the same.
func sameAsUnmarshal(t *testing.T, payload []byte) {
	t.Helper()
	if len(payload) == 0 || payload[0] != '{' {
		return // ParseFrame takes nothing else, whatever json.Unmarshal says
	}
	want, werr := parseFrameByUnmarshal(payload)
	if werr != nil {
		if f, err := ParseFrame(payload); err == nil {
			if _, isCMB := f.(*CMBFrame); isCMB {
				t.Fatalf("%s: parsed, json.Unmarshal refuses it: %v", payload, werr)
			}
		}
		return
	}
	got, err := ParseFrame(payload)
	if err != nil {
		t.Fatalf("%s: %v; json.Unmarshal reads it", payload, err)
	}
	a, _ := MarshalFrame(got)
	b, _ := MarshalFrame(want)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s:\n got %s\nwant %s", payload, a, b)
	}
}

func TestParseCMBFrameMatchesUnmarshal(t *testing.T) {
	rec := string(buildSample(t, nil).Encode())
	withText := func(s string) string {
		return strings.Replace(rec, `"text":"`, `"text":`+s[:len(s)-1], 1)
	}
	for _, p := range []string{
		`{"type":"cmb","timestamp":1,"cmb":` + rec + `}`,
		`{ "type" : "cmb" , "timestamp" : 1 , "cmb" : ` + rec + ` } `,
		`{"TYPE":"cmb","Timestamp":7,"CMB":` + rec + `,"PUBLICKEY":"k","e2epublickey":"e","To":"x","DIRECTED":true}`,
		`{"type":"c\u006db","cmb":` + rec + `}`,
		`{"type":"cmb","cmb":null}`,
		`{"type":"cmb"}`,
		`{"type":"cmb","cmb":` + rec + `,"cmb":null}`,
		`{"type":"cmb","cmb":null,"cmb":` + rec + `}`,
		`{"type":"cmb","cmb":{"key":1},"cmb":` + rec + `}`,
		`{"type":"cmb","cmb":"x"}`,
		`{"type":"cmb","cmb":[1]}`,
		`{"type":"cmb","timestamp":"1","cmb":` + rec + `}`,
		`{"type":"cmb","timestamp":1.5,"cmb":` + rec + `}`,
		`{"type":"cmb","timestamp":null,"to":null,"cmb":` + rec + `}`,
		`{"type":"cmb","to":"a\"b\\c\u00e9\ud83d\ude42","cmb":` + rec + `}`,
		`{"type":"cmb","to":5,"cmb":` + rec + `}`,
		`{"type":"cmb","directed":"yes","cmb":` + rec + `}`,
		`{"type":"cmb","type":"ping","cmb":` + rec + `}`,
		`{"type":"ping","type":"cmb","cmb":` + rec + `}`,
		`{"type":"cmb","cmb":` + withText(`"esc\naped \"text\" \u00e9\ud800"`) + `}`,
		"{\"type\":\"cmb\",\"to\":\"bad \xff utf8\",\"cmb\":" + withText("\"bad \xfe utf8\"") + "}",
		`{"type":"cmb","cmb":` + rec + `}x`,
		`{"type":"cmb","cmb":` + rec,
		`{"type":"cmb","x":{"nested":["}",{"a":"]"}]},"cmb":` + rec + `}`,
	} {
		sameAsUnmarshal(t, []byte(p))
	}
}

// FuzzObjectMembers holds the one-pass reader to json.Unmarshal on any
// valid object: the same members, and each string decoded the same.
func FuzzObjectMembers(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":"x\u00e9","a":[1,{"c":"}"}], "d" : null}`))
	f.Add([]byte("{\"\xff\":\"\\ud800\",\"k\\\"\":\" \"}"))
	f.Add(buildSample(f, nil).Encode())
	// Runs of backslashes before a quote: the string ends where the run
	// is even.
	f.Add([]byte(`{"a\\":"\\\"","b\\\\":"x\\\\","c":["\"\\",{"\\\"}":"]"}]}`))
	// Past indexedMembers, with names repeated before and after it.
	many := `{"r":0`
	for i := range 2 * indexedMembers {
		many += `,"m` + string(rune('a'+i)) + `":` + string(rune('0'+i%10)) + `,"r":` + string(rune('0'+i%10))
	}
	f.Add([]byte(many + `,"ma":"last"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		data = trimJSON(data)
		if !isKind(data, '{') || !json.Valid(data) {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		// appendObjectMembers: each name once, with the last value.
		ms := appendObjectMembers([]member{{"before", nil}}, data)[1:]
		if len(ms) != len(want) {
			t.Fatalf("%d members appended, json.Unmarshal finds %d", len(ms), len(want))
		}
		seen := map[string]bool{}
		for i, m := range ms {
			if seen[m.name] || !bytes.Equal(m.v, want[m.name]) {
				t.Fatalf("member %d %q: %s (repeated %v), json.Unmarshal gives %s", i, m.name, m.v, seen[m.name], want[m.name])
			}
			seen[m.name] = true
		}
		got := objectMembers(data)
		if len(got) != len(want) {
			t.Fatalf("%d members, json.Unmarshal finds %d", len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("member %q: %s, json.Unmarshal gives %s", k, got[k], v)
			}
			if isKind(v, '"') {
				var s string
				json.Unmarshal(v, &s)
				if u := unquote(v); u != s {
					t.Fatalf("string %s: %q, json.Unmarshal gives %q", v, u, s)
				}
			}
		}
	})
}

// TestMarshalCMBFrameMatchesJSON: a cmb frame written directly is the
// JSON value json.Marshal writes, member for member.
func TestMarshalCMBFrameMatchesJSON(t *testing.T) {
	rec := buildSample(t, nil)
	rec.Fields[0].Text = `a <tag> & "quotes" \ and é, 🙂, ` + "\u2028"
	for _, f := range []*CMBFrame{
		{Timestamp: 1, CMB: rec},
		{Timestamp: -5, To: "0192e4a2-7b5c-7def-8a3b-9c4d5e6f7a8b", Directed: true, CMB: rec, PublicKey: "k<&>", E2EPublicKey: "e"},
		{Timestamp: 0, CMB: nil},
	} {
		got, err := MarshalFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]byte(`{"type":"cmb",`), body[1:]...)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	}
}

// StringValue decodes what json.Unmarshal into a string decodes, and
// refuses every other value.
func TestStringValueIsUnmarshal(t *testing.T) {
	for _, raw := range []string{`"remember"`, `""`, `"caf\u00e9 \"q\" \\ \n"`, "\"bad \xff byte\"", `"snow ☃"`,
		`null`, `5`, `-1.5e3`, `true`, `{"a":"b"}`, `["x"]`} {
		var want string
		wantOK := raw[0] == '"' && json.Unmarshal([]byte(raw), &want) == nil
		got, ok := StringValue([]byte(raw))
		if ok != wantOK || got != want {
			t.Errorf("StringValue(%q) = %q, %v; json.Unmarshal gives %q, %v", raw, got, ok, want, wantOK)
		}
	}
}

// TestParsedTextsOutliveThePayload: a cmb frame's record keeps its texts
// and its bytes when the payload it was parsed from is overwritten (a
// reused read buffer). Texts without escapes share the record's kept
// bytes when it keeps them (Canonical), and have bytes of their own when
// it does not; the fields are json.Unmarshal's either way.
func TestParsedTextsOutliveThePayload(t *testing.T) {
	plain := buildSample(t, nil)
	escaped := buildSample(t, func(d *Draft) { d.Fields[Mood].Text = "a remix \"quoted\"\n é" })
	rec := string(plain.Encode())
	for _, p := range []string{
		`{"type":"cmb","timestamp":1,"cmb":` + rec + `}`,
		`{"type":"cmb","timestamp":1,"cmb":` + string(escaped.Encode()) + `,"publicKey":"k"}`,
		`{"type":"cmb","cmb":` + strings.Replace(rec, `"fields":{`, `"fields": {`, 1) + `}`, // not Encode's bytes
		`{"type":"cmb","cmb":` + strings.Replace(rec, `"fields":{`, `"fields":{"x-extra":{"big":"`+strings.Repeat("z", 500)+`"},`, 1) + `}`,
	} {
		want, err := parseFrameByUnmarshal([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		payload := []byte(p)
		f, err := ParseFrame(payload)
		if err != nil {
			t.Fatal(err)
		}
		r := f.(*CMBFrame).CMB
		canon := append([]byte(nil), r.Canonical()...)
		for i := range payload {
			payload[i] = 'X'
		}
		w := want.(*CMBFrame).CMB
		if !reflect.DeepEqual(r.Fields, w.Fields) || !reflect.DeepEqual(r.FieldsExtra, w.FieldsExtra) {
			t.Fatalf("%s: fields\n got %+v\nwant %+v", p, r.Fields, w.Fields)
		}
		if !bytes.Equal(r.Canonical(), canon) || !bytes.Equal(canon, w.Encode()) {
			t.Fatalf("%s: canonical bytes changed with the payload", p)
		}
		for i := range r.Fields {
			text := r.Fields[i].Text
			at := unsafe.Pointer(unsafe.StringData(text))
			inEnc := r.enc != nil && uintptr(at) >= uintptr(unsafe.Pointer(&r.enc[0])) && uintptr(at) < uintptr(unsafe.Pointer(&r.enc[0]))+uintptr(len(r.enc))
			plainText := !strings.ContainsAny(text, "\"\n")
			if inEnc != (r.enc != nil && plainText) {
				t.Fatalf("%s: field %d %q in the kept bytes: %v (kept: %v)", p, i, text, inEnc, r.enc != nil)
			}
		}
	}
}
