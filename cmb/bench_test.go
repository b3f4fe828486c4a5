package cmb

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// record1KB is a signed record whose seven texts total about 1 KB.
func record1KB(b testing.TB) (*Record, ed25519.PublicKey) {
	r := buildSample(b, func(d *Draft) {
		for i := range d.Fields {
			d.Fields[i].Text = strings.Repeat("memory ", 146/7*1+14)[:146]
		}
		d.Fields[Focus].Text = "caf\u00e9 " + d.Fields[Focus].Text[6:]
	})
	return r, testKey(b).Public().(ed25519.PublicKey)
}

func BenchmarkAddress(b *testing.B) {
	r, _ := record1KB(b)
	texts := r.Fields.Texts()
	b.ReportAllocs()
	for b.Loop() {
		AddressV1(&texts, nil, r.CreatedBy)
	}
}

func BenchmarkSign(b *testing.B) {
	r, _ := record1KB(b)
	priv := testKey(b)
	b.ReportAllocs()
	for b.Loop() {
		r.Sign(priv)
	}
}

// BenchmarkVerify is address recomputation plus signature verification of a
// 1 KB record: what a receiver pays per CMB beyond decoding.
func BenchmarkVerify(b *testing.B) {
	r, pub := record1KB(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.VerifyAddress(); err != nil {
			b.Fatal(err)
		}
		if err := r.VerifySignature(pub); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBareEd25519Verify is the floor: ed25519.Verify on the same payload.
func BenchmarkBareEd25519Verify(b *testing.B) {
	r, pub := record1KB(b)
	payload := r.SigPayload()
	sig, _ := DecodeBase64(r.Sig)
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(pub, payload, sig) {
			b.Fatal("bad")
		}
	}
}

// BenchmarkVerifyKey is BenchmarkBareEd25519Verify with the key decoded
// ahead (VerifyKey), as a receiver verifies a known author's records.
func BenchmarkVerifyKey(b *testing.B) {
	r, pub := record1KB(b)
	payload := r.SigPayload()
	sig, _ := DecodeBase64(r.Sig)
	k := NewVerifyKey(pub)
	b.ReportAllocs()
	for b.Loop() {
		if !k.Verify(payload, sig) {
			b.Fatal("bad")
		}
	}
}

// BenchmarkVerifyOverhead interleaves full verification and the bare verify in
// one run and reports their ratio (target ≤ 1.15), so machine noise hits both.
func BenchmarkVerifyOverhead(b *testing.B) {
	r, pub := record1KB(b)
	payload := r.SigPayload()
	sig, _ := DecodeBase64(r.Sig)
	var full, bare time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range 16 {
			ed25519.Verify(pub, payload, sig)
		}
		t1 := time.Now()
		for range 16 {
			r.VerifyAddress()
			r.VerifySignature(pub)
		}
		t2 := time.Now()
		bare += t1.Sub(t0)
		full += t2.Sub(t1)
	}
	b.ReportMetric(float64(full)/float64(bare), "x-bare-verify")
	b.ReportMetric(float64(full.Nanoseconds())/float64(16*b.N), "ns/full-verify")
	b.ReportMetric(float64(bare.Nanoseconds())/float64(16*b.N), "ns/bare-verify")
}

func BenchmarkFrameEncode(b *testing.B) {
	r, _ := record1KB(b)
	f := &CMBFrame{Timestamp: 1, CMB: r}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		p, err := MarshalFrame(f)
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		WriteFrame(&buf, p)
	}
}

func BenchmarkFrameDecode(b *testing.B) {
	r, _ := record1KB(b)
	p, _ := MarshalFrame(&CMBFrame{Timestamp: 1, CMB: r})
	var stream bytes.Buffer
	WriteFrame(&stream, p)
	wire := stream.Bytes()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		payload, err := ReadFrame(bytes.NewReader(wire), buf)
		if err != nil {
			b.Fatal(err)
		}
		buf = payload
		if _, err := ParseFrame(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordDecode(b *testing.B) {
	r, _ := record1KB(b)
	wire := r.Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(wire); err != nil {
			b.Fatal(err)
		}
	}
}
