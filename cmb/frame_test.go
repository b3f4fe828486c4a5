package cmb

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestFrameRoundTripAndPartialReads(t *testing.T) {
	payloads := [][]byte{[]byte(`{"type":"ping"}`), bytes.Repeat([]byte("x"), MaxFrameSize)}
	var stream bytes.Buffer
	for _, p := range payloads {
		if err := WriteFrame(&stream, p); err != nil {
			t.Fatal(err)
		}
	}
	// One byte at a time: stream reassembly (TR-4).
	r := iotest.OneByteReader(bytes.NewReader(stream.Bytes()))
	for i, want := range payloads {
		got, err := ReadFrame(r, nil)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if _, err := ReadFrame(r, nil); err != io.EOF {
		t.Fatalf("after last frame: %v, want EOF", err)
	}
}

func TestFrameLengthLimits(t *testing.T) {
	for _, n := range []uint32{0, MaxFrameSize + 1, 1<<32 - 1} {
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], n)
		r := bytes.NewReader(append(hdr[:], "{}"...))
		_, err := ReadFrame(r, nil)
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Code != CodeFrameTooLarge || !errors.Is(err, ErrFrameSize) {
			t.Fatalf("length %d: err = %v, want FrameError 1003", n, err)
		}
		if r.Len() != 2 {
			t.Fatalf("length %d: reader consumed the payload after a bad prefix", n)
		}
	}
	if err := WriteFrame(io.Discard, nil); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("zero-length write: %v", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, MaxFrameSize+1)); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("oversized write: %v", err)
	}
	// Truncated body.
	var b bytes.Buffer
	WriteFrame(&b, []byte(`{"type":"ping"}`))
	if _, err := ReadFrame(bytes.NewReader(b.Bytes()[:b.Len()-3]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
}

func TestParseFrame(t *testing.T) {
	rec := buildSample(t, nil)
	hs := &Handshake{NodeID: authorID, Name: "alice", Version: ProtocolVersion, PublicKey: EncodeKey(testKey(t).Public().(ed25519.PublicKey)), Group: "alpha", LifecycleRole: "participant", Extensions: []string{}}
	frames := []Frame{
		hs,
		&CMBFrame{Timestamp: 9, CMB: rec, PublicKey: hs.PublicKey},
		&Fetch{ReqID: "r1", Key: rec.Key},
		&FetchResult{ReqID: "r1", Key: rec.Key, Found: true, CMB: rec},
		&FetchResult{ReqID: "r2", Key: rec.Key, Found: false},
		&Ping{}, &Pong{},
		&PeerInfo{Peers: []PeerEntry{{NodeID: authorID, Name: "a", LastSeen: 3}}},
		&ErrorFrame{Code: CodeGroupMismatch, Message: "group mismatch"},
	}
	for _, f := range frames {
		b, err := MarshalFrame(f)
		if err != nil {
			t.Fatalf("%s: %v", f.FrameType(), err)
		}
		if !bytes.HasPrefix(b, []byte(`{"type":"`+f.FrameType()+`"`)) {
			t.Fatalf("%s: type not first: %s", f.FrameType(), b)
		}
		got, err := ParseFrame(b)
		if err != nil {
			t.Fatalf("%s: parse own frame: %v", f.FrameType(), err)
		}
		if got.FrameType() != f.FrameType() {
			t.Fatalf("type %s parsed as %s", f.FrameType(), got.FrameType())
		}
		if again, _ := MarshalFrame(got); !bytes.Equal(again, b) {
			t.Fatalf("%s: re-marshal differs\n%s\n%s", f.FrameType(), b, again)
		}
	}
	if fr, _ := ParseFrame(mustMarshal(t, &FetchResult{ReqID: "r", Key: rec.Key})); fr.(*FetchResult).CMB != nil {
		t.Fatal("null cmb decoded as a record")
	}
	if cf, _ := ParseFrame(mustMarshal(t, &CMBFrame{CMB: rec})); cf.(*CMBFrame).CMB.Key != rec.Key {
		t.Fatal("cmb frame lost its record")
	}

	discard := []string{``, `not json`, `[]`, `{"type":7}`, `{"notype":"cmb"}`, `{"type":"cmb"}`, `{"type":"cmb","cmb":{"key":1}}`,
		`{"type":"handshake","nodeId":"x"}`, `{"type":"cmb-fetch","reqId":"r"}`, `{"type":"ping"`}
	for _, in := range discard {
		if _, err := ParseFrame([]byte(in)); !errors.Is(err, ErrDiscard) {
			t.Errorf("%q: err = %v, want discard", in, err)
		}
	}
	u, err := ParseFrame([]byte(`{"type":"x-acme-telemetry","v":1}`))
	if err != nil || u.FrameType() != "x-acme-telemetry" {
		t.Fatalf("unknown type: %v %v", u, err)
	}
	if _, ok := u.(*Unknown); !ok {
		t.Fatalf("unknown type not reported as Unknown")
	}
}

func mustMarshal(t *testing.T, f Frame) []byte {
	b, err := MarshalFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandshakeValidate(t *testing.T) {
	good := Handshake{NodeID: authorID, Name: "alice", Version: "1.1.0", PublicKey: EncodeKey(testKey(t).Public().(ed25519.PublicKey))}
	if _, err := good.Validate(); err != nil {
		t.Fatalf("good handshake: %v", err)
	}
	ref := good
	ref.Version = "0.2.3" // what the reference runtime sends (§14 A4)
	if _, err := ref.Validate(); err != nil {
		t.Fatalf("reference version refused: %v", err)
	}
	cases := map[string]struct {
		mut  func(*Handshake)
		code int
	}{
		"v2":           {func(h *Handshake) { h.Version = "2.0.0" }, CodeVersionMismatch},
		"not semver":   {func(h *Handshake) { h.Version = "1.1" }, CodeVersionMismatch},
		"0.3":          {func(h *Handshake) { h.Version = "0.3.0" }, CodeVersionMismatch},
		"bad node":     {func(h *Handshake) { h.NodeID = "node-1" }, CodeAuthFailed},
		"long name":    {func(h *Handshake) { h.Name = strings.Repeat("é", 33) }, CodeAuthFailed},
		"control":      {func(h *Handshake) { h.Name = "a\x07b" }, CodeAuthFailed},
		"short key":    {func(h *Handshake) { h.PublicKey = "AAAA" }, CodeAuthFailed},
		"group":        {func(h *Handshake) { h.Group = "Alpha" }, CodeGroupMismatch},
		"role":         {func(h *Handshake) { h.LifecycleRole = "king" }, CodeAuthFailed},
		"uuid version": {func(h *Handshake) { h.NodeID = "0192e4a2-7b5c-1def-8a3b-9c4d5e6f7a8b" }, CodeAuthFailed},
	}
	for name, c := range cases {
		h := good
		c.mut(&h)
		code, err := h.Validate()
		if err == nil || code != c.code {
			t.Errorf("%s: code %d err %v, want code %d", name, code, err, c.code)
		}
	}
}

func TestValidateName(t *testing.T) {
	ok := []string{"a", "Alice's node", "日本語のノード", strings.Repeat("x", 64), "emoji 🙂"}
	bad := []string{"", strings.Repeat("x", 65), "tab\there", "nul\x00", "del\x7f", "c1\u0085", "bad\xff"}
	for _, s := range ok {
		if err := ValidateName(s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	for _, s := range bad {
		if err := ValidateName(s); !errorIs(err, ErrBadName) {
			t.Errorf("%q: err = %v, want bad-name", s, err)
		}
	}
}

// A cmb frame given the record's encoding (RawCMB) is the frame that
// encodes the record itself, for a record in clear, one with lineage and
// a sealed one; and the frame parses back to the record.
func TestMarshalFrameRawCMB(t *testing.T) {
	plain, _ := record1KB(t)
	remix := buildSample(t, func(d *Draft) {
		d.Parents = []string{plain.Key}
		d.Fields[Mood].Text = "a remix \"quoted\"\n"
	})
	sealed := *plain
	sealed.Sealed, sealed.E2E = "c2VhbGVk", &E2E{Nonce: "bm9uY2U"}
	for _, r := range []*Record{plain, remix, &sealed} {
		f := &CMBFrame{Timestamp: 7, CMB: r, PublicKey: "pk", To: "to", Directed: true}
		want, err := MarshalFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		f.RawCMB = r.Encode()
		got, err := MarshalFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame with RawCMB\n%s\nwant\n%s", got, want)
		}
		back, err := ParseFrame(got)
		if err != nil {
			t.Fatal(err)
		}
		if k := back.(*CMBFrame).CMB.Key; k != r.Key {
			t.Fatalf("parsed key %s, want %s", k, r.Key)
		}
	}
}
