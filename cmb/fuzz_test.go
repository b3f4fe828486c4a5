package cmb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	WriteFrame(&b, []byte(`{"type":"ping"}`))
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0x10, 0, 1, '{'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			p, err := ReadFrame(r, nil)
			if err != nil {
				var fe *FrameError
				if errors.As(err, &fe) && fe.Code != CodeFrameTooLarge {
					t.Fatalf("frame error with code %d", fe.Code)
				}
				return
			}
			if len(p) == 0 || len(p) > MaxFrameSize {
				t.Fatalf("returned a %d-byte payload", len(p))
			}
			if n := binary.BigEndian.Uint32(data[len(data)-r.Len()-len(p)-4:]); int(n) != len(p) {
				t.Fatalf("payload length %d does not match prefix %d", len(p), n)
			}
			// Whatever a frame holds, parsing it must not panic.
			ParseFrame(p)
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	rec := buildSample(f, nil)
	cf, _ := MarshalFrame(&CMBFrame{Timestamp: 1, CMB: rec})
	f.Add(cf)
	f.Add([]byte(`{"type":"handshake","nodeId":"0192e4a2-7b5c-7def-8a3b-9c4d5e6f7a8b","name":"n","version":"1.1.0","publicKey":"IVL40Zt5HSRFMkLhXy6rbLfP-ntqXtMAl5YOBpiB2xI"}`))
	f.Add([]byte(`{"type":"cmb-fetch-result","reqId":"r","key":"k","found":false,"cmb":null}`))
	f.Add([]byte(`{"type":"x"}`))
	// Frame members read without json.Unmarshal, and those it must still read.
	f.Add([]byte(`{"type":"cmb","timestamp":-12,"directed":true,"cmb":null}`))
	f.Add([]byte(`{"type":"cmb","timestamp":99999999999999999999,"directed":false,"cmb":null}`))
	f.Add([]byte(`{"type":"cmb","timestamp":1.5e3,"directed":null,"cmb":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsUnmarshal(t, data)
		fr, err := ParseFrame(data)
		if err != nil {
			if !errors.Is(err, ErrDiscard) {
				t.Fatalf("non-discard error %v", err)
			}
			return
		}
		if _, ok := fr.(*Unknown); ok {
			return
		}
		if cf, ok := fr.(*CMBFrame); ok && !bytes.Equal(cf.CMB.Canonical(), cf.CMB.Encode()) {
			t.Fatalf("Canonical differs from Encode\n got %s\nwant %s", cf.CMB.Canonical(), cf.CMB.Encode())
		}
		out, err := MarshalFrame(fr)
		if err != nil {
			t.Fatalf("cannot re-marshal a parsed frame: %v", err)
		}
		if _, err := ParseFrame(out); err != nil {
			t.Fatalf("re-marshalled frame does not parse: %v\n%s", err, out)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(buildSample(f, nil).Encode())
	f.Add(buildSample(f, func(d *Draft) { d.Parents = []string{"cmb1-" + string(bytes.Repeat([]byte("a"), 64))} }).Encode())
	f.Add([]byte(`{"key":"k","createdBy":"a","createdAt":1,"fields":"c2VhbGVk","_e2e":{"nonce":"n"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			if ReasonOf(err) != ReasonBadRecord {
				t.Fatalf("decode error without bad-record reason: %v", err)
			}
			return
		}
		out := r.Encode()
		// In a frame, the record keeps its bytes exactly when they are
		// Encode's.
		if fr, err := ParseFrame(cmbFrameOf(data)); err == nil {
			p := fr.(*CMBFrame).CMB
			if !bytes.Equal(p.Canonical(), out) {
				t.Fatalf("Canonical differs from Encode\n got %s\nwant %s", p.Canonical(), out)
			}
			if (p.enc != nil) != bytes.Equal(trimJSON(data), out) {
				t.Fatalf("kept bytes: %v, but the record is canonical: %v\n%s", p.enc != nil, bytes.Equal(trimJSON(data), out), data)
			}
		}
		r2, err := Decode(out)
		if err != nil {
			t.Fatalf("own encoding does not decode: %v\n%s", err, out)
		}
		if !bytes.Equal(r2.Encode(), out) {
			t.Fatalf("encoding is not stable")
		}
		// Validation and address checks must not panic on anything decodable.
		r.Validate()
		r.VerifyAddress()
		r.VerifySignature(make([]byte, 32))
		r.Clone()
	})
}
