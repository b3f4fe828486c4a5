package cmb

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decode parses one record. Unknown members at every depth are kept; known
// members must have their schema types, and key, createdBy, createdAt and
// fields are required. Decode checks shape only: Validate and Verify check rules.
func Decode(data []byte) (*Record, error) { return decode(data, false) }

// DecodeDraft parses a record as an author writes it by hand, before it is
// addressed and signed: key, createdBy and createdAt may be absent (left
// zero), and a fields object is read as DecodeDraftFields reads it. Sealed
// fields (a ciphertext string) and everything else are read as Decode reads
// them.
func DecodeDraft(data []byte) (*Record, error) { return decode(data, true) }

func decode(data []byte, draft bool) (*Record, error) {
	data = trimJSON(data)
	if !isKind(data, '{') || !ValidJSON(data) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, newError(ReasonBadRecord, "record is not a JSON object", err)
		}
		return nil, newError(ReasonBadRecord, "record is null", nil)
	}
	return decodeValid(data, draft, nil)
}

// recordMembers is room for the members of a record as cmbnode writes
// one (more are allocated).
const recordMembers = 12

// decodeValid is decode of a valid JSON object, whose validation noted
// where some of its values end in ends (which may be nil).
func decodeValid(data []byte, draft bool, ends *valueEnds) (*Record, error) {
	r := &Record{}
	if err := decodeValidInto(r, data, draft, ends, nil); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeValidInto is decodeValid into *r, a zero Record, which is left
// partly set on an error. Field texts share texts' copy of data when
// texts is not nil.
func decodeValidInto(r *Record, data []byte, draft bool, ends *valueEnds, texts *textCopy) error {
	var buf [recordMembers]member
	obj := appendObjectMembersEnds(buf[:0], data, ends)
	var err error
	required := []string{"key", "createdBy", "createdAt", "fields"}
	if draft {
		required = []string{"fields"}
	}
	for _, req := range required {
		if _, ok := lookup(obj, req); !ok {
			return newError(ReasonBadRecord, "missing member "+strconv.Quote(req), nil)
		}
	}
	for _, m := range obj {
		name, raw := m.name, json.RawMessage(m.v)
		switch name {
		case "key":
			r.Key, err = decodeString(raw, "key")
		case "createdBy":
			r.CreatedBy, err = decodeString(raw, "createdBy")
		case "createdAt":
			r.CreatedAt, err = decodeInt(raw, "createdAt")
		case "group":
			r.Group, err = decodeString(raw, "group")
			r.present |= hasGroup
		case "to":
			r.To, err = decodeString(raw, "to")
			r.present |= hasTo
		case "sig":
			r.Sig, err = decodeString(raw, "sig")
			r.present |= hasSig
		case "sigAlg":
			r.SigAlg, err = decodeString(raw, "sigAlg")
			r.present |= hasSigAlg
		case "fields":
			err = decodeFieldsMember(r, raw, draft, ends, texts)
		case "lineage":
			r.present |= hasLineage
			r.Lineage, err = decodeLineage(raw)
		case "_e2e":
			r.E2E, err = decodeE2E(raw)
		case "tether":
			if !isKind(raw, '{') {
				err = typeError("tether", "an object")
			} else {
				r.Tether = append(json.RawMessage(nil), raw...)
			}
		default:
			r.Extra = append(r.Extra, Member{Name: name, Value: append(json.RawMessage(nil), raw...)})
		}
		if err != nil {
			return err
		}
	}
	sortMembers(r.Extra)
	if r.Sealed != "" && r.SealNonce() == "" {
		return newError(ReasonBadRecord, "fields are ciphertext but no _e2e.nonce is present", nil)
	}
	return nil
}

func decodeFieldsMember(r *Record, raw json.RawMessage, draft bool, ends *valueEnds, texts *textCopy) error {
	if isKind(raw, '"') {
		// E2E in transit: fields is ciphertext (MMP §18.2.1).
		s, err := decodeString(raw, "fields")
		if err != nil {
			return err
		}
		if s == "" {
			return newError(ReasonBadRecord, "fields ciphertext is empty", nil)
		}
		r.Sealed = s
		return nil
	}
	if draft {
		f, extra, err := decodeDraftFieldsValid(raw)
		if err != nil {
			return err
		}
		r.Fields, r.FieldsExtra = *f, extra
		return nil
	}
	// A record's fields are decoded in place (a record that fails is
	// dropped): a Fields decoded apart and copied in would be allocated.
	extra, err := decodeFieldsInto(&r.Fields, raw, ends, texts)
	if err != nil {
		return err
	}
	r.FieldsExtra = extra
	return nil
}

// DecodeDraftFields parses a `fields` object as an author writes it: each of
// the seven maps to its text as a plain string or to a field object as a
// record carries it, and a field left out, null, or with text "" is neutral
// (MMP §14 A1). Members beyond the seven are returned as extra, for the
// caller to keep or refuse.
func DecodeDraftFields(raw []byte) (*Fields, Members, error) {
	const want = "an object of field name to text"
	if err := validObject(raw, "fields", want); err != nil {
		return nil, nil, err
	}
	return decodeDraftFieldsValid(trimJSON(raw))
}

// DecodeValidDraftFields is DecodeDraftFields of raw known to be valid
// JSON (a member of a message json.Valid accepted, as ObjectMembers gives
// it), which is not scanned for validity again.
func DecodeValidDraftFields(raw []byte) (*Fields, Members, error) {
	raw = trimJSON(raw)
	if !isKind(raw, '{') {
		return nil, nil, typeError("fields", "an object of field name to text")
	}
	return decodeDraftFieldsValid(raw)
}

func decodeDraftFieldsValid(raw []byte) (*Fields, Members, error) {
	var buf [NumFields + 1]member
	obj, err := decodeObject(buf[:0], raw, "fields", "an object of field name to text")
	if err != nil {
		return nil, nil, err
	}
	var f Fields
	var extra Members
	for _, m := range obj {
		name, v := m.name, json.RawMessage(m.v)
		i, known := FieldIndex(name)
		switch {
		case !known:
			extra = append(extra, Member{Name: name, Value: append(json.RawMessage(nil), v...)})
		case isKind(v, '"'):
			f[i].Text = unquote(v)
		case string(v) == "null":
		case isKind(v, '{'):
			err = decodeField(&f[i], v, name, nil)
		default:
			err = typeError("fields."+name, "a string or an object with a text member")
		}
		if err != nil {
			return nil, nil, err
		}
	}
	for i := range f {
		f[i].Text = orNeutral(f[i].Text)
	}
	sortMembers(extra)
	return &f, extra, nil
}

// orNeutral is the text a field carries when its author gave text t: an
// empty field is "neutral", never "" (MMP §14 A1).
func orNeutral(t string) string { return cmp.Or(t, Neutral) }

// DecodeFields parses a `fields` object: all seven members required, each an
// object with a string `text`. Members beyond the seven are returned as extra.
func DecodeFields(raw []byte) (*Fields, Members, error) {
	if err := validObject(raw, "fields", "an object"); err != nil {
		return nil, nil, err
	}
	return decodeFieldsValid(trimJSON(raw))
}

func decodeFieldsValid(raw []byte) (*Fields, Members, error) {
	var f Fields
	extra, err := decodeFieldsInto(&f, raw, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	return &f, extra, nil
}

// decodeFieldsInto is decodeFieldsValid decoding into *f, which is left
// partly set on an error, stepping over the field objects ends knows, its
// texts shared with texts' copy when texts is not nil.
func decodeFieldsInto(f *Fields, raw []byte, ends *valueEnds, texts *textCopy) (Members, error) {
	var buf [NumFields + 1]member
	if !isKind(raw, '{') {
		return nil, typeError("fields", "an object")
	}
	obj := appendObjectMembersEnds(buf[:0], raw, ends)
	for i, name := range FieldNames {
		v, ok := lookup(obj, name)
		if !ok {
			return nil, newError(ReasonBadRecord, "fields."+name+" is missing (all seven are required; use \"neutral\")", nil)
		}
		if err := decodeField(&f[i], v, name, texts); err != nil {
			return nil, err
		}
	}
	var extra Members
	if len(obj) > NumFields {
		for _, m := range obj {
			if _, known := FieldIndex(m.name); !known {
				extra = append(extra, Member{Name: m.name, Value: append(json.RawMessage(nil), m.v...)})
			}
		}
		sortMembers(extra)
	}
	return extra, nil
}

// decodeField decodes field name's object raw, its text shared with
// texts' copy when texts is not nil. Its path in the record ("fields." +
// name) is only spelled out in an error: a record's seven fields are
// decoded without it.
func decodeField(f *Field, raw json.RawMessage, name string, texts *textCopy) error {
	var buf [4]member
	if !isKind(raw, '{') {
		return typeError("fields."+name, "an object with a text member")
	}
	obj := appendObjectMembers(buf[:0], raw)
	if _, ok := lookup(obj, "text"); !ok {
		return newError(ReasonBadRecord, "fields."+name+".text is missing", nil)
	}
	path := func() string { return "fields." + name }
	var err error
	for _, m := range obj {
		k, v := m.name, json.RawMessage(m.v)
		switch {
		case k == "text":
			if !isKind(v, '"') {
				return typeError(path()+".text", "a string")
			}
			f.Text = texts.unquote(v)
		case k == "vector":
			if !isKind(v, '[') {
				return typeError(path()+".vector", "an array of numbers")
			}
			if err = json.Unmarshal(v, &f.Vector); err != nil {
				return typeError(path()+".vector", "an array of numbers")
			}
		case name == "mood" && k == "valence":
			f.Valence, err = decodeUnit(v, name, k)
		case name == "mood" && k == "arousal":
			f.Arousal, err = decodeUnit(v, name, k)
		default:
			f.Extra = append(f.Extra, Member{Name: k, Value: append(json.RawMessage(nil), v...)})
		}
		if err != nil {
			return err
		}
	}
	sortMembers(f.Extra)
	return nil
}

// decodeUnit reads raw, member k of field name's object in a valid
// record, as json.Unmarshal reads a float64 (a JSON number is the syntax
// ParseFloat takes, and a number out of float64's range is refused by
// both), and checks it is in [-1, 1].
func decodeUnit(raw json.RawMessage, name, k string) (*float64, error) {
	x, err := strconv.ParseFloat(string(raw), 64)
	if !isNumber(raw) || err != nil {
		return nil, typeError("fields."+name+"."+k, "a number")
	}
	if x < -1 || x > 1 {
		return nil, newError(ReasonBadRecord, fmt.Sprintf("fields.%s.%s is %v, outside [-1, 1]", name, k, x), nil)
	}
	return &x, nil
}

func decodeLineage(raw json.RawMessage) (*Lineage, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var buf [4]member
	obj, err := decodeObject(buf[:0], raw, "lineage", "an object or null")
	if err != nil {
		return nil, err
	}
	l := &Lineage{}
	for _, m := range obj {
		k, v := m.name, json.RawMessage(m.v)
		switch k {
		case "parents":
			l.Parents, err = decodeStrings(v, "lineage.parents")
			l.present |= hasParents
		case "ancestors":
			l.Ancestors, err = decodeStrings(v, "lineage.ancestors")
			l.present |= hasAncestors
		case "method":
			l.Method, err = decodeString(v, "lineage.method")
			l.present |= hasMethod
		default:
			l.Extra = append(l.Extra, Member{Name: k, Value: append(json.RawMessage(nil), v...)})
		}
		if err != nil {
			return nil, err
		}
	}
	sortMembers(l.Extra)
	return l, nil
}

func decodeE2E(raw json.RawMessage) (*E2E, error) {
	var buf [2]member
	obj, err := decodeObject(buf[:0], raw, "_e2e", "an object")
	if err != nil {
		return nil, err
	}
	e := &E2E{}
	for _, m := range obj {
		k, v := m.name, json.RawMessage(m.v)
		if k == "nonce" {
			e.Nonce, err = decodeString(v, "_e2e.nonce")
			if err != nil {
				return nil, err
			}
			continue
		}
		e.Extra = append(e.Extra, Member{Name: k, Value: append(json.RawMessage(nil), v...)})
	}
	sortMembers(e.Extra)
	return e, nil
}

// decodeObject appends to buf the members of raw, a member of a valid
// record that should be an object, naming path and what was wanted when
// it is something else.
func decodeObject(buf []member, raw json.RawMessage, path, want string) ([]member, error) {
	if !isKind(raw, '{') {
		return nil, typeError(path, want)
	}
	return appendObjectMembers(buf, raw), nil
}

// validObject checks raw, from outside a record, before it is read as
// one of a record's objects.
func validObject(raw []byte, path, want string) error {
	raw = trimJSON(raw)
	if !isKind(raw, '{') {
		return typeError(path, want)
	}
	if !ValidJSON(raw) {
		var obj map[string]json.RawMessage
		return newError(ReasonBadRecord, path, json.Unmarshal(raw, &obj))
	}
	return nil
}

func decodeStrings(raw json.RawMessage, path string) ([]string, error) {
	if !isKind(raw, '[') {
		return nil, typeError(path, "an array of strings")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, typeError(path, "an array of strings")
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		s, err := decodeString(e, path)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func decodeString(raw json.RawMessage, path string) (string, error) {
	if !isKind(raw, '"') {
		return "", typeError(path, "a string")
	}
	return unquote(raw), nil
}

func decodeInt(raw json.RawMessage, path string) (int64, error) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, typeError(path, "an integer")
	}
	return n, nil
}

func typeError(path, want string) error {
	return newError(ReasonBadRecord, path+" must be "+want, nil)
}

func isKind(raw []byte, c byte) bool { return len(raw) > 0 && raw[0] == c }

func isNumber(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}

// sortMembers sorts m by name (each name is there once). Most objects have
// no unknown member: an empty m is left as it is, without sort.Slice's
// reflection.
func sortMembers(m Members) {
	if len(m) > 1 {
		slices.SortFunc(m, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	}
}

// Encode emits the record as minified JSON: known members in a fixed order,
// then unknown members. A decoded record re-encodes to the same JSON value.
func (r *Record) Encode() []byte {
	return r.AppendJSON(make([]byte, 0, r.sizeHint()))
}

// sizeHint is about the length of r's encoding (a little over for a
// record of plain text), so that encoding a record allocates its buffer
// once instead of growing it through every size up to a standard CMB's.
func (r *Record) sizeHint() int {
	n := 512 + len(r.Sealed) + len(r.Tether)
	for i := range r.Fields {
		n += len(r.Fields[i].Text) + 24*len(r.Fields[i].Vector)
	}
	if l := r.Lineage; l != nil {
		n += 72 * (len(l.Parents) + len(l.Ancestors))
	}
	return n
}

// MarshalJSON implements json.Marshaler with Encode.
func (r *Record) MarshalJSON() ([]byte, error) { return r.Encode(), nil }

// UnmarshalJSON implements json.Unmarshaler with Decode.
func (r *Record) UnmarshalJSON(data []byte) error {
	d, err := Decode(data)
	if err != nil {
		return err
	}
	*r = *d
	return nil
}

// AppendJSON appends the record's JSON encoding to b.
func (r *Record) AppendJSON(b []byte) []byte {
	b = r.appendHead(b)
	b = append(b, `,"fields":`...)
	if r.Sealed != "" {
		b = appendString(b, r.Sealed)
	} else {
		b = r.Fields.appendJSON(b, r.FieldsExtra)
	}
	return r.appendTail(b)
}

// appendHead appends the encoding's members before fields: `{"key":…`
// up to the group and to members.
func (r *Record) appendHead(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendString(b, r.Key)
	b = append(b, `,"createdBy":`...)
	b = appendString(b, r.CreatedBy)
	b = append(b, `,"createdAt":`...)
	b = strconv.AppendInt(b, r.CreatedAt, 10)
	b = appendOptional(b, `,"group":`, r.Group, r.present&hasGroup != 0)
	return appendOptional(b, `,"to":`, r.To, r.present&hasTo != 0)
}

// appendTail appends the encoding's members after fields, and its
// closing brace.
func (r *Record) appendTail(b []byte) []byte {
	if r.Lineage != nil {
		b = append(b, `,"lineage":`...)
		b = r.Lineage.appendJSON(b)
	} else if r.present&hasLineage != 0 {
		b = append(b, `,"lineage":null`...)
	}
	b = appendOptional(b, `,"sig":`, r.Sig, r.present&hasSig != 0)
	b = appendOptional(b, `,"sigAlg":`, r.SigAlg, r.present&hasSigAlg != 0)
	if r.E2E != nil {
		b = append(b, `,"_e2e":{`...)
		first := true
		if r.E2E.Nonce != "" {
			b = append(b, `"nonce":`...)
			b = appendString(b, r.E2E.Nonce)
			first = false
		}
		b = appendMembers(b, r.E2E.Extra, first)
		b = append(b, '}')
	}
	if r.Tether != nil {
		b = append(b, `,"tether":`...)
		b = append(b, r.Tether...)
	}
	b = appendMembers(b, r.Extra, false)
	return append(b, '}')
}

// AppendJSON appends the seven fields as a JSON object in spec order.
func (f *Fields) AppendJSON(b []byte) []byte { return f.appendJSON(b, nil) }

// FieldsJSON is the record's `fields` object as it travels, unknown members
// included: the plaintext that E2E sealing encrypts.
func (r *Record) FieldsJSON() []byte {
	return r.Fields.appendJSON(make([]byte, 0, 256), r.FieldsExtra)
}

func (f *Fields) appendJSON(b []byte, extra Members) []byte {
	b = append(b, '{')
	for i := range f {
		b = appendFieldHead(b, i)
		b = appendString(b, f[i].Text)
		b = f[i].appendTail(b)
	}
	return appendFieldsTail(b, extra)
}

// appendFieldHead appends what comes before field i's text: a comma
// after the first, its name and `:{"text":`.
func appendFieldHead(b []byte, i int) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, FieldNames[i]...)
	return append(b, `":{"text":`...)
}

// appendTail appends the members of a field's object after its text,
// and its closing brace.
func (x *Field) appendTail(b []byte) []byte {
	if x.Valence != nil {
		b = append(b, `,"valence":`...)
		b = AppendJSONFloat(b, *x.Valence)
	}
	if x.Arousal != nil {
		b = append(b, `,"arousal":`...)
		b = AppendJSONFloat(b, *x.Arousal)
	}
	if x.Vector != nil {
		b = append(b, `,"vector":[`...)
		for j, v := range x.Vector {
			if j > 0 {
				b = append(b, ',')
			}
			b = AppendJSONFloat(b, v)
		}
		b = append(b, ']')
	}
	b = appendMembers(b, x.Extra, false)
	return append(b, '}')
}

// appendFieldsTail appends the fields object's members beyond the seven
// and its closing brace.
func appendFieldsTail(b []byte, extra Members) []byte {
	b = appendMembers(b, extra, false)
	return append(b, '}')
}

func (l *Lineage) appendJSON(b []byte) []byte {
	b = append(b, `{"parents":`...)
	b = appendStrings(b, l.Parents)
	if l.present&hasAncestors != 0 || l.Ancestors != nil {
		b = append(b, `,"ancestors":`...)
		b = appendStrings(b, l.Ancestors)
	}
	b = appendOptional(b, `,"method":`, l.Method, l.present&hasMethod != 0)
	b = appendMembers(b, l.Extra, false)
	return append(b, '}')
}

// appendOptional appends an optional string member (member is `,"name":`)
// when the record carried it or it is set, so a decoded record re-encodes
// with the members it had, "" ones included.
func appendOptional(b []byte, member, v string, present bool) []byte {
	if !present && v == "" {
		return b
	}
	b = append(b, member...)
	return appendString(b, v)
}

func appendStrings(b []byte, s []string) []byte {
	b = append(b, '[')
	for i, x := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, x)
	}
	return append(b, ']')
}

func appendMembers(b []byte, m Members, first bool) []byte {
	for _, x := range m {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, x.Name)
		b = append(b, ':')
		b = append(b, x.Value...)
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does; U+2028/2029 are escaped so the output is safe in NDJSON
// and JavaScript alike.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != '\u2028' && r != '\u2029' && (r != utf8.RuneError || size != 1) {
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		if r == utf8.RuneError {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendJSONFloat appends f as encoding/json writes a float64 (and
// JavaScript, in the common range): the shortest decimal that reads back
// as f, in exponent form below 1e-6 or from 1e21 on, the exponent without
// a leading zero (1e-07 is 1e-7). NaN and ±Inf, which encoding/json
// refuses, are written null; a caller that must refuse them checks first.
func AppendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
