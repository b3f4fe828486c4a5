package ipc

import (
	"math"
	"slices"
	"strconv"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// appendAcceptedEvent appends the bytes json.Marshal writes for ev, without
// its reflection and map sorting: a listener is sent one cmb-accepted event
// per record received, so this encoding is paid for every one. It reports
// false, having appended nothing that counts, for what json.Marshal would
// refuse (a drift or an affect that is not a finite number).
func appendAcceptedEvent(b []byte, ev *node.AcceptedEvent) ([]byte, bool) {
	var ok bool
	b = append(b, `{"key":`...)
	b = appendJSONString(b, ev.Key)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, ev.Source)
	b = append(b, `,"createdBy":`...)
	b = appendJSONString(b, ev.CreatedBy)
	b = append(b, `,"createdAt":`...)
	b = strconv.AppendInt(b, ev.CreatedAt, 10)
	b = append(b, `,"group":`...)
	b = appendJSONString(b, ev.Group)
	b = append(b, `,"fields":`...)
	if b, ok = appendFieldsJSON(b, ev.Fields); !ok {
		return b, false
	}
	b = append(b, `,"directed":`...)
	b = strconv.AppendBool(b, ev.Directed)
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, ev.Decision)
	b = append(b, `,"drift":`...)
	if b, ok = appendJSONFloatPtr(b, ev.Drift); !ok {
		return b, false
	}
	if ev.Nearest != "" {
		b = append(b, `,"nearest":`...)
		b = appendJSONString(b, ev.Nearest)
	}
	if ev.Hidden {
		b = append(b, `,"hidden":true`...)
	}
	if ev.Via != "" {
		b = append(b, `,"via":`...)
		b = appendJSONString(b, ev.Via)
	}
	b = append(b, `,"cursor":`...)
	b = appendJSONString(b, ev.Cursor)
	return append(b, '}'), true
}

// sortedFieldNames are cmb.FieldNames in the order json.Marshal writes a
// map's keys: sorted bytewise.
var sortedFieldNames = func() [cmb.NumFields]string {
	s := cmb.FieldNames
	slices.Sort(s[:])
	return s
}()

// appendFieldsJSON appends f as json.Marshal writes the map: null when nil,
// else its members sorted by name. The seven fields, which is what f
// holds but for a record from an older store, are looked up once each.
func appendFieldsJSON(b []byte, f node.FieldsJSON) ([]byte, bool) {
	if f == nil {
		return append(b, "null"...), true
	}
	if len(f) == cmb.NumFields {
		var vals [cmb.NumFields]node.FieldJSON
		all := true
		for i, name := range sortedFieldNames {
			if vals[i], all = f[name]; !all {
				break
			}
		}
		if all {
			return appendFieldMembers(b, sortedFieldNames[:], vals[:])
		}
	}
	names := make([]string, 0, len(f))
	for name := range f {
		names = append(names, name)
	}
	slices.Sort(names)
	vals := make([]node.FieldJSON, len(names))
	for i, name := range names {
		vals[i] = f[name]
	}
	return appendFieldMembers(b, names, vals)
}

// appendFieldMembers appends the object of the members names[i]: vals[i],
// names sorted.
func appendFieldMembers(b []byte, names []string, vals []node.FieldJSON) ([]byte, bool) {
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		fj := &vals[i]
		var ok bool
		b = appendJSONString(b, name)
		b = append(b, `:{"text":`...)
		b = appendJSONString(b, fj.Text)
		if fj.Valence != nil {
			b = append(b, `,"valence":`...)
			if b, ok = appendJSONFloatPtr(b, fj.Valence); !ok {
				return b, false
			}
		}
		if fj.Arousal != nil {
			b = append(b, `,"arousal":`...)
			if b, ok = appendJSONFloatPtr(b, fj.Arousal); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// appendJSONFloatPtr appends null for nil, else the number as json.Marshal
// writes a float64; it reports false for NaN and the infinities, which
// json.Marshal refuses.
func appendJSONFloatPtr(b []byte, p *float64) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	f := *p
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	return cmb.AppendJSONFloat(b, f), true
}
