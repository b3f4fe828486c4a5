package cmb

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SigAlg is the only signature algorithm MMP v1 defines. Verifiers pin it and
// never dispatch on the record's sigAlg member (§18.3.1).
const SigAlg = "ed25519"

var sigTag = []byte("mmp-sig-v1\n")

// AppendSigPayload appends the mmp-sig-v1 signing payload (MMP §18.3.1):
// "mmp-sig-v1\n" LP(key) LP(author) LP(decimal(createdAt)) LP(group) LP(to).
func AppendSigPayload(dst []byte, key, author string, createdAt int64, group, to string) []byte {
	dst = append(dst, sigTag...)
	dst = AppendLP(dst, key)
	dst = AppendLP(dst, author)
	var num [20]byte
	dst = AppendLPBytes(dst, strconv.AppendInt(num[:0], createdAt, 10))
	dst = AppendLP(dst, group)
	return AppendLP(dst, to)
}

// SigPayload returns the bytes the author signs: createdBy verbatim, the
// group value as carried (absent is ""), and to ("" for a broadcast).
func (r *Record) SigPayload() []byte {
	var stack [256]byte
	return AppendSigPayload(stack[:0], r.Key, r.CreatedBy, r.CreatedAt, r.Group, r.To)
}

// Sign sets sig and sigAlg. The key must already be set (it is signed).
func (r *Record) Sign(priv ed25519.PrivateKey) error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	if len(priv) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign record: private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	r.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, r.SigPayload()))
	r.SigAlg = SigAlg
	r.present |= hasSig | hasSigAlg
	r.enc = nil
	return nil
}

// VerifySignature checks sig over the rebuilt payload with pub. An absent sig
// is ErrUnsigned; anything else that fails is ErrBadSignature.
func (r *Record) VerifySignature(pub ed25519.PublicKey) error { return r.VerifySignatureWith(pub, nil) }

// VerifySignatureWith is VerifySignature with pub already decoded as k
// (NewVerifyKey), which is used only if it is pub's; nil decodes pub here.
// The outcome is the same either way.
func (r *Record) VerifySignatureWith(pub ed25519.PublicKey, k *VerifyKey) error {
	if r.IsUnsigned() {
		return newError(ReasonUnsigned, "record carries no sig", nil)
	}
	if r.present&hasSigAlg != 0 && r.SigAlg != SigAlg {
		return newError(ReasonBadSignature, fmt.Sprintf("sigAlg %q is not %q", Truncate(r.SigAlg, 40), SigAlg), nil)
	}
	if len(pub) != ed25519.PublicKeySize {
		return newError(ReasonBadSignature, fmt.Sprintf("author key is %d bytes, want %d", len(pub), ed25519.PublicKeySize), nil)
	}
	// A signature decodes onto the stack: room for more than its 64
	// bytes, so a longer one is still reported with its length.
	var sigBuf [80]byte
	sig, err := appendDecodeBase64(sigBuf[:0], r.Sig)
	if err != nil {
		return newError(ReasonBadSignature, "sig is not base64", err)
	}
	if len(sig) != ed25519.SignatureSize {
		return newError(ReasonBadSignature, fmt.Sprintf("sig is %d bytes, want %d", len(sig), ed25519.SignatureSize), nil)
	}
	var stack [256]byte
	payload := AppendSigPayload(stack[:0], r.Key, r.CreatedBy, r.CreatedAt, r.Group, r.To)
	var ok bool
	if k.Is(pub) {
		ok = k.Verify(payload, sig)
	} else {
		ok = ed25519.Verify(pub, payload, sig)
	}
	if !ok {
		return newError(ReasonBadSignature, "signature does not verify with the author's key", nil)
	}
	return nil
}

// DecodeBase64 accepts base64url or standard base64, padded or not, with
// surrounding whitespace: MMP emits unpadded base64url but the reference
// runtime writes standard padded base64, and peers read both (§1.1). A string
// mixing both alphabets is corruption, not a variant, and is refused.
func DecodeBase64(s string) ([]byte, error) { return appendDecodeBase64(nil, s) }

// appendDecodeBase64 is DecodeBase64 appending to dst: decoding allocates
// nothing when dst has room for the bytes.
func appendDecodeBase64(dst []byte, s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	trimmed := strings.TrimRight(s, "=")
	if len(s)-len(trimmed) > 2 {
		return nil, errors.New("base64 has more than two padding characters")
	}
	hasURL := strings.ContainsAny(trimmed, "-_")
	hasStd := strings.ContainsAny(trimmed, "+/")
	enc := base64.RawURLEncoding
	switch {
	case hasURL && hasStd:
		return nil, errors.New("base64 mixes the standard (+/) and URL (-_) alphabets")
	case hasStd:
		enc = base64.RawStdEncoding
	}
	b, err := enc.AppendDecode(dst, []byte(trimmed)) // not copied: Decode only reads it
	if err != nil {
		return nil, fmt.Errorf("bad base64: %w", err)
	}
	return b, nil
}

// ParsePublicKey reads an Ed25519 public key: 32 raw bytes, base64url or base64.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := DecodeBase64(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("ed25519 public key is not base64url: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("ed25519 public key is %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// EncodeKey renders an Ed25519 public key as MMP writes it: unpadded base64url.
func EncodeKey(pub ed25519.PublicKey) string {
	return base64.RawURLEncoding.EncodeToString(pub)
}
