package cmb

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

func errorIs(err, target error) bool { return err != nil && errors.Is(err, target) }

const (
	authorID    = "0192e4a2-7b5c-7def-8a3b-9c4d5e6f7a8b"
	recipientID = "0192e4a2-7b5c-7def-8a3b-000000000001"
	otherID     = "0192e4a2-7b5c-7def-8a3b-000000000002"
)

func testKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	priv, _ := vectorKey(t)
	return priv
}

func sampleDraft() Draft {
	var d Draft
	texts := []string{"deploy the parser", "latency regressions", "ship by friday", "users wait", "alice owns rollout", "backend team", "focused"}
	for i, s := range texts {
		d.Fields[i].Text = s
	}
	v, a := 0.4, -0.2
	d.Fields[Mood].Valence, d.Fields[Mood].Arousal = &v, &a
	d.Group = "alpha"
	d.CreatedBy = authorID
	d.CreatedAt = 1751000000123
	return d
}

func buildSample(t testing.TB, mut func(*Draft)) *Record {
	t.Helper()
	d := sampleDraft()
	if mut != nil {
		mut(&d)
	}
	r, err := Build(d, testKey(t))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return r
}

// roundTrip encodes and decodes, so every negative case goes through the wire form.
func roundTrip(t testing.TB, r *Record) *Record {
	t.Helper()
	d, err := Decode(r.Encode())
	if err != nil {
		t.Fatalf("decode own encoding: %v\n%s", err, r.Encode())
	}
	return d
}

func TestVerifyAcceptsHonestRecords(t *testing.T) {
	priv := testKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	broadcast := roundTrip(t, buildSample(t, nil))
	if err := broadcast.Verify(Policy{Audience: Audience{Group: "alpha", Self: otherID}, AuthorKey: pub}); err != nil {
		t.Fatalf("broadcast rejected: %v", err)
	}
	directed := roundTrip(t, buildSample(t, func(d *Draft) { d.To = recipientID; d.Fields[Focus].Text = "for you" }))
	// nodeIds compare case-insensitively (§3.1.1).
	if err := directed.Verify(Policy{Audience: Audience{Group: "alpha", Self: strings.ToUpper(recipientID)}, AuthorKey: pub}); err != nil {
		t.Fatalf("directed rejected at its recipient: %v", err)
	}
	remix := roundTrip(t, buildSample(t, func(d *Draft) {
		d.Parents = []string{broadcast.Key, directed.Key}
		d.Ancestors = []string{directed.Key, broadcast.Key}
	}))
	if !remix.IsRemix() {
		t.Fatal("record with parents is not a remix")
	}
	if err := remix.Verify(Policy{Audience: Audience{Group: "alpha"}, AuthorKey: pub}); err != nil {
		t.Fatalf("remix rejected: %v", err)
	}
}

func TestVerifyRejections(t *testing.T) {
	priv := testKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	_, wrongPriv, _ := ed25519.GenerateKey(nil)
	wrongPub := wrongPriv.Public().(ed25519.PublicKey)
	okAudience := Audience{Group: "alpha", Self: recipientID}

	type tc struct {
		name   string
		record func() *Record
		policy Policy
		want   error
	}
	var cases []tc
	for i, name := range FieldNames {
		i := i
		cases = append(cases,
			tc{"tampered " + name + " text", func() *Record {
				r := roundTrip(t, buildSample(t, nil))
				r.Fields[i].Text += "!"
				return r
			}, Policy{Audience: okAudience, AuthorKey: pub}, ErrAddressMismatch},
			tc{"tampered " + name + " text, re-keyed", func() *Record {
				r := roundTrip(t, buildSample(t, nil))
				r.Fields[i].Text += "!"
				r.Key, _ = r.ComputeKey()
				return r
			}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature})
	}
	cases = append(cases, []tc{
		{"tampered createdAt", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.CreatedAt++
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"tampered group (moved into the receiver's group)", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.SetGroup("beta")
			return r
		}, Policy{Audience: Audience{Group: "beta"}, AuthorKey: pub}, ErrBadSignature},
		{"tampered to (redirected to the receiver)", func() *Record {
			r := roundTrip(t, buildSample(t, func(d *Draft) { d.To = otherID }))
			r.To = recipientID
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"to stripped (directed turned broadcast)", func() *Record {
			r := roundTrip(t, buildSample(t, func(d *Draft) { d.To = recipientID }))
			r.To = ""
			return r
		}, Policy{Audience: Audience{Group: "alpha", Self: otherID}, AuthorKey: pub}, ErrBadSignature},
		{"relabelled author", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.CreatedBy = otherID
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"wrong key", func() *Record { return roundTrip(t, buildSample(t, nil)) },
			Policy{Audience: okAudience, AuthorKey: wrongPub}, ErrBadSignature},
		{"truncated signature", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Sig = r.Sig[:len(r.Sig)-4]
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"padded-garbage signature", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Sig += "AAAAAAAA"
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"non-base64 signature", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Sig = "!!" + r.Sig[2:]
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"empty signature", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Sig = ""
			return roundTrip(t, r) // "sig":"" stays present on the wire
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"sigAlg none", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.SigAlg = "none"
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadSignature},
		{"unsigned", func() *Record {
			r := buildSample(t, nil)
			r.Sig, r.SigAlg, r.present = "", "", r.present&^(hasSig|hasSigAlg)
			return roundTrip(t, r)
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrUnsigned},
		{"unsigned, author unknown", func() *Record {
			r := buildSample(t, nil)
			r.Sig, r.SigAlg, r.present = "", "", r.present&^(hasSig|hasSigAlg)
			return roundTrip(t, r)
		}, Policy{Audience: okAudience}, ErrUnsigned},
		{"signed, author unknown", func() *Record { return roundTrip(t, buildSample(t, nil)) },
			Policy{Audience: okAudience}, ErrBadSignature},
		{"address/field mismatch (key swapped)", func() *Record {
			other := buildSample(t, func(d *Draft) { d.Fields[Focus].Text = "something else" })
			r := roundTrip(t, buildSample(t, nil))
			r.Key = other.Key
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrAddressMismatch},
		{"remix parent added", func() *Record {
			r := roundTrip(t, buildSample(t, func(d *Draft) { d.Parents = []string{"cmb1-" + strings.Repeat("a", 64)} }))
			r.Lineage.Parents = append(r.Lineage.Parents, "cmb1-"+strings.Repeat("b", 64))
			r.Lineage.Ancestors = append(r.Lineage.Ancestors, "cmb1-"+strings.Repeat("b", 64))
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrAddressMismatch},
		{"malformed key", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Key = "cmb1-XYZ"
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadAddress},
		{"v2-style cmb- with 64 hex is not legacy", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Key = "cmb-" + r.Key[5:]
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadAddress},
		{"wrong group", func() *Record { return roundTrip(t, buildSample(t, nil)) },
			Policy{Audience: Audience{Group: "beta"}, AuthorKey: pub}, ErrWrongGroup},
		{"absent group is default, not ours", func() *Record {
			r := buildSample(t, nil)
			r.Group, r.present = "", r.present&^hasGroup
			r.Sign(priv)
			return roundTrip(t, r)
		}, Policy{Audience: Audience{Group: "alpha"}, AuthorKey: pub}, ErrWrongGroup},
		{"wrong recipient", func() *Record { return roundTrip(t, buildSample(t, func(d *Draft) { d.To = otherID })) },
			Policy{Audience: okAudience, AuthorKey: pub}, ErrWrongRecipient},
		{"bad group grammar", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.SetGroup("Alpha Team")
			r.Sign(priv)
			return r
		}, Policy{Audience: Audience{Group: "Alpha Team"}, AuthorKey: pub}, ErrBadGroup},
		{"field too long", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Fields[Issue].Text = strings.Repeat("x", MaxFieldBytes+1)
			r.Key, _ = r.ComputeKey()
			r.Sign(priv)
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrFieldTooLong},
		{"too many parents", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Lineage = &Lineage{}
			for i := 0; i <= MaxParents; i++ {
				r.Lineage.Parents = append(r.Lineage.Parents, AddressV1(&[NumFields]string{string(rune('a' + i%26)), strings.Repeat("p", i)}, nil, ""))
			}
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrTooManyParents},
		{"parent missing from ancestors", func() *Record {
			r := roundTrip(t, buildSample(t, func(d *Draft) { d.Parents = []string{"cmb1-" + strings.Repeat("a", 64)} }))
			r.Lineage.Ancestors = []string{"cmb1-" + strings.Repeat("c", 64)}
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadLineage},
		{"duplicate parent", func() *Record {
			p := "cmb1-" + strings.Repeat("a", 64)
			r := roundTrip(t, buildSample(t, nil))
			r.Lineage = &Lineage{Parents: []string{p, p}}
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrBadLineage},
		{"sealed record must be opened first", func() *Record {
			r := roundTrip(t, buildSample(t, nil))
			r.Sealed, r.E2E, r.Fields = "AAAA", &E2E{Nonce: "AAAAAAAAAAAAAAAA"}, Fields{}
			return r
		}, Policy{Audience: okAudience, AuthorKey: pub}, ErrSealed},
	}...)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.record().Verify(c.policy)
			if err == nil {
				t.Fatalf("accepted; want %v", c.want)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v (reason %q), want reason %q", err, ReasonOf(err), c.want.(*Error).Reason)
			}
		})
	}
}

func TestNonNFCReencoding(t *testing.T) {
	priv := testKey(t)
	pub := priv.Public().(ed25519.PublicKey)
	composed, decomposed := "caf\u00e9", "cafe\u0301"

	// Field text enters the address through NFC: a relay that re-encodes a
	// field decomposed still carries the same content, and the record verifies.
	r := roundTrip(t, buildSample(t, func(d *Draft) { d.Fields[Focus].Text = composed }))
	if r.Fields[Focus].Text != composed {
		t.Fatalf("build did not keep NFC text")
	}
	r.Fields[Focus].Text = decomposed
	if err := r.Verify(Policy{Audience: Audience{Group: "alpha"}, AuthorKey: pub}); err != nil {
		t.Fatalf("NFC-equivalent field text rejected: %v", err)
	}
	// Build normalises decomposed input to NFC.
	b := buildSample(t, func(d *Draft) { d.Fields[Focus].Text = decomposed })
	if b.Fields[Focus].Text != composed {
		t.Fatalf("build kept non-NFC text %q", b.Fields[Focus].Text)
	}

	// The signed members are signed byte for byte: a non-NFC re-encoding of a
	// signed author label is a different author and must not verify.
	s := &Record{Key: r.Key, CreatedBy: composed + "-agent", CreatedAt: 5, Fields: b.Fields}
	s.SetGroup("alpha")
	if err := s.Sign(priv); err != nil {
		t.Fatal(err)
	}
	s = roundTrip(t, s)
	s.Fields = b.Fields
	s.CreatedBy = decomposed + "-agent"
	if err := s.VerifySignature(pub); !errorIs(err, ErrBadSignature) {
		t.Fatalf("decomposed author label: err = %v, want bad-signature", err)
	}
}

func TestUnsignedAllowedOnlyByPolicy(t *testing.T) {
	r := buildSample(t, nil)
	r.Sig, r.SigAlg, r.present = "", "", r.present&^(hasSig|hasSigAlg)
	r = roundTrip(t, r)
	if err := r.Verify(Policy{Audience: Audience{Group: "alpha"}, AllowUnsigned: true}); err != nil {
		t.Fatalf("unsigned record with AllowUnsigned: %v", err)
	}
}

func TestBuildDefaults(t *testing.T) {
	r := buildSample(t, func(d *Draft) {
		d.Fields[Issue].Text = ""
		d.Group = ""
	})
	if r.Fields[Issue].Text != Neutral {
		t.Fatalf("empty text became %q, want neutral", r.Fields[Issue].Text)
	}
	if !r.HasGroup() || r.Group != "default" {
		t.Fatalf("group = %q (present %v), want default, present", r.Group, r.HasGroup())
	}
	if r.SigAlg != SigAlg || len(r.Sig) != 86 {
		t.Fatalf("sig %q/%q is not unpadded base64url ed25519", r.Sig, r.SigAlg)
	}
	for _, bad := range []func(*Draft){
		func(d *Draft) { d.CreatedBy = "not-a-uuid" },
		func(d *Draft) { d.To = "bob" },
		func(d *Draft) { d.Group = "UPPER" },
		func(d *Draft) { x := 1.5; d.Fields[Mood].Valence = &x },
		func(d *Draft) { x := 0.5; d.Fields[Focus].Valence = &x },
	} {
		d := sampleDraft()
		bad(&d)
		if _, err := Build(d, testKey(t)); err == nil {
			t.Errorf("Build accepted a bad draft: %+v", d)
		}
	}
}

// A receiver holding the author's key refuses
// an unsigned record, the legacy unsigned `cmb-` form included.
func TestUnsignedRefusedWhenKeyKnown(t *testing.T) {
	pub := testKey(t).Public().(ed25519.PublicKey)
	texts := [NumFields]string{"testing conformance vectors", "none", "verify implementations agree", "interop", "exact bytes", "generator", "neutral"}
	legacy := &Record{Key: AddressLegacy(&texts), CreatedBy: "legacy-author", CreatedAt: 1}
	for i := range texts {
		legacy.Fields[i].Text = texts[i]
	}
	legacy.SetGroup("alpha")
	unsigned := buildSample(t, nil)
	unsigned.Sig, unsigned.SigAlg, unsigned.present = "", "", unsigned.present&^(hasSig|hasSigAlg)
	unsigned = roundTrip(t, unsigned)
	for name, r := range map[string]*Record{"legacy cmb-": legacy, "cmb1-": unsigned} {
		for _, allow := range []bool{false, true} {
			err := r.Verify(Policy{Audience: Audience{Group: "alpha"}, AuthorKey: pub, AllowUnsigned: allow})
			if !errorIs(err, ErrUnsigned) || !errors.Is(err, ErrDowngrade) {
				t.Errorf("%s unsigned with the author's key held (AllowUnsigned=%v): err = %v, want unsigned/downgrade", name, allow, err)
			}
		}
		if err := r.Verify(Policy{Audience: Audience{Group: "alpha"}}); !errorIs(err, ErrUnsigned) {
			t.Errorf("%s unsigned, strict: err = %v, want unsigned", name, err)
		}
	}
	if err := legacy.Verify(Policy{Audience: Audience{Group: "alpha"}, AllowUnsigned: true}); err != nil {
		t.Errorf("legacy unsigned record, no key held, permissive: %v", err)
	}
}
