package ipc

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

// marshalEvent is the event message as json.Marshal writes it.
func marshalEvent(t *testing.T, name string, data any) []byte {
	t.Helper()
	d, err := json.Marshal(struct {
		Type  string `json:"type"`
		Event string `json:"event"`
		Data  any    `json:"data"`
	}{"event", name, data})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAcceptedEventEncodesAsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	texts := []string{"", "plain words", "line\nbreak\ttab", `quote " and \ backslash`, "<html> & co", "naïve café ☕", "bad \xff utf8", "\u2028sep\u2029", "ctl \x01\x1f\x7f"}
	floats := []float64{0, -0.0, 1, -1, 0.5, 1e-7, 1.5e-6, 1e-6, 123456789, 1e21, 2.5e21, -3e-9, math.SmallestNonzeroFloat64, math.MaxFloat64, 0.1 + 0.2}
	pick := func() string { return texts[r.Intn(len(texts))] }
	ptr := func() *float64 {
		if r.Intn(3) == 0 {
			return nil
		}
		f := floats[r.Intn(len(floats))]
		return &f
	}
	for i := range 400 {
		ev := node.AcceptedEvent{
			Key: "cmb1-" + pick(), Source: pick(), CreatedBy: pick(), CreatedAt: r.Int63() - r.Int63(),
			Group: pick(), Directed: r.Intn(2) == 0, Decision: pick(), Drift: ptr(),
			Hidden: r.Intn(2) == 0, Cursor: pick(), Seq: uint64(i),
		}
		if r.Intn(2) == 0 {
			ev.Nearest = pick()
		}
		if r.Intn(2) == 0 {
			ev.Via = pick()
		}
		switch r.Intn(4) {
		case 0: // nil: null
		case 1: // the seven fields
			f := cmb.Fields{}
			for j := range f {
				f[j] = cmb.Field{Text: pick(), Valence: ptr(), Arousal: ptr()}
			}
			ev.Fields = node.FieldsView(&f)
		default: // any names, in any number
			ev.Fields = node.FieldsJSON{}
			for range r.Intn(9) {
				name := pick()
				if r.Intn(2) == 0 {
					name = cmb.FieldNames[r.Intn(cmb.NumFields)]
				}
				ev.Fields[name] = node.FieldJSON{Text: pick(), Valence: ptr(), Arousal: ptr()}
			}
		}
		got, err := encodeEvent([]byte("kept"), events.CMBAccepted, ev)
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte("kept"), marshalEvent(t, events.CMBAccepted, ev)...); !bytes.Equal(got, want) {
			t.Fatalf("event %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestAcceptedEventNotFiniteRefused(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		f := cmb.Fields{}
		f[3].Valence = &bad
		for _, ev := range []node.AcceptedEvent{{Key: "k", Drift: &bad}, {Key: "k", Fields: node.FieldsView(&f)}} {
			if b, err := encodeEvent([]byte("kept"), events.CMBAccepted, ev); err == nil {
				t.Fatalf("%v encoded: %s", bad, b)
			}
		}
	}
}

func TestOtherEventsEncodeAsJSONMarshal(t *testing.T) {
	data := map[string]any{"peer": "p<1>", "n": 3}
	got, err := encodeEvent(nil, events.PeerJoined, data)
	if err != nil {
		t.Fatal(err)
	}
	if want := marshalEvent(t, events.PeerJoined, data); !bytes.Equal(got, want) {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

// BenchmarkAcceptedEventEncode is a listener's cost per received record
// of a standard CMB (seven fields of 300 bytes): "encode" is the socket's
// encoding, "marshal" json.Marshal's, for comparison.
func BenchmarkAcceptedEventEncode(b *testing.B) {
	f := cmb.Fields{}
	for i := range f {
		f[i].Text = string(bytes.Repeat([]byte("kalo mirento "), 300/13+1)[:300])
	}
	drift := 0.4321
	ev := node.AcceptedEvent{
		Key: "cmb1-" + string(bytes.Repeat([]byte("ab"), 32)), Source: "n1", CreatedBy: "n2", CreatedAt: 1_751_000_000_000,
		Group: "bench", Fields: node.FieldsView(&f), Decision: "aligned", Drift: &drift, Via: node.SourceGossip, Cursor: "boot.42",
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = encodeEvent(buf[:0], events.CMBAccepted, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(events.Event{Name: events.CMBAccepted, Data: ev}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
