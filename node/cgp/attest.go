package cgp

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Domain tags of §6.5: raw ASCII, no length prefix, no NUL.
const (
	tagGenesis     = "contextgraph/attest/1/genesis"
	tagLink        = "contextgraph/attest/1/link"
	tagFrame       = "contextgraph/attest/1/frame"
	tagMerkleEmpty = "contextgraph/attest/1/merkle-empty"
)

// AlgorithmEd25519 is the only signature scheme we produce or check.
const AlgorithmEd25519 = "ed25519"

// Digest renders a 32-byte hash in the D1 grammar.
func Digest(sum [32]byte) string { return "sha256:" + hex.EncodeToString(sum[:]) }

// DigestBytes is Digest(SHA-256(b)).
func DigestBytes(b []byte) string { return Digest(sha256.Sum256(b)) }

// IsDigest reports whether s is exactly sha256:<64 lowercase hex> (D1/F5).
// Uppercase hex is refused: digests are compared byte for byte, so a case
// change is indistinguishable from tampering.
func IsDigest(s string) bool {
	if len(s) != 71 || !strings.HasPrefix(s, "sha256:") {
		return false
	}
	for i := 7; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseDigest returns the raw bytes of a D1 digest.
func ParseDigest(s string) ([32]byte, error) {
	var out [32]byte
	if !IsDigest(s) {
		return out, fmt.Errorf("%q is not sha256:<64 lowercase hex>", s)
	}
	_, err := hex.Decode(out[:], []byte(s[7:]))
	return out, err
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendOpt(b []byte, s *string) []byte {
	if s == nil {
		return append(b, 0)
	}
	return appendStr(append(b, 1), *s)
}

// EncodeLink is the §6.5.1 encoding of one provenance link. Lengths are
// UTF-8 byte counts (Go's len), never runes.
func EncodeLink(l Link) []byte {
	b := appendStr(nil, l.Type)
	for _, f := range []*string{l.URI, l.Range, l.Digest, l.Method, l.By} {
		b = appendOpt(b, f)
	}
	return b
}

// ChainHead folds the provenance links source-first (array order) into the
// §6.5.2 chain head.
func ChainHead(links []Link) [32]byte {
	h := sha256.Sum256([]byte(tagGenesis))
	for _, l := range links {
		s := sha256.New()
		s.Write([]byte(tagLink))
		s.Write(h[:])
		s.Write(EncodeLink(l))
		copy(h[:], s.Sum(nil))
	}
	return h
}

// FrameCommitment is the §6.5.2 commitment. Only the provider id, frame id,
// content digest and provenance enter it: content is bound through the
// digest alone, which is why a signed frame must carry one (F14).
func FrameCommitment(providerID, frameID string, contentDigest *string, provenance []Link) [32]byte {
	head := ChainHead(provenance)
	b := []byte(tagFrame)
	b = appendStr(b, providerID)
	b = appendStr(b, frameID)
	b = appendOpt(b, contentDigest)
	b = append(b, head[:]...)
	return sha256.Sum256(b)
}

func merkleLeaf(c [32]byte) [32]byte {
	return sha256.Sum256(append([]byte{0}, c[:]...))
}

func merkleNode(l, r [32]byte) [32]byte {
	b := make([]byte, 0, 65)
	b = append(b, 1)
	b = append(b, l[:]...)
	b = append(b, r[:]...)
	return sha256.Sum256(b)
}

// splitPoint is the largest power of two strictly less than n (RFC 6962).
func splitPoint(n int) int {
	k := 1
	for k<<1 < n {
		k <<= 1
	}
	return k
}

// MerkleRoot is the RFC 6962 tree hash over commitments already in
// canonical FrameId order (§6.5.3).
func MerkleRoot(commitments [][32]byte) [32]byte {
	switch len(commitments) {
	case 0:
		return sha256.Sum256([]byte(tagMerkleEmpty))
	case 1:
		return merkleLeaf(commitments[0])
	}
	k := splitPoint(len(commitments))
	return merkleNode(MerkleRoot(commitments[:k]), MerkleRoot(commitments[k:]))
}

// InclusionPath returns the audit path of leaf i, ordered leaf-upward.
func InclusionPath(commitments [][32]byte, i int) []InclusionStep {
	n := len(commitments)
	if n <= 1 {
		return []InclusionStep{}
	}
	k := splitPoint(n)
	if i < k {
		r := MerkleRoot(commitments[k:])
		return append(InclusionPath(commitments[:k], i), InclusionStep{Sibling: Digest(r), SiblingIsLeft: false})
	}
	l := MerkleRoot(commitments[:k])
	return append(InclusionPath(commitments[k:], i-k), InclusionStep{Sibling: Digest(l), SiblingIsLeft: true})
}

// VerifyInclusion recomputes a root from a leaf commitment and its proof.
func VerifyInclusion(leaf [32]byte, p InclusionProof, root [32]byte) error {
	if p.LeafCount < 1 || p.LeafIndex < 0 || p.LeafIndex >= p.LeafCount {
		return fmt.Errorf("leaf_index %d out of range for leaf_count %d", p.LeafIndex, p.LeafCount)
	}
	acc := merkleLeaf(leaf)
	for i, st := range p.Path {
		sib, err := ParseDigest(st.Sibling)
		if err != nil {
			return fmt.Errorf("path[%d]: %w", i, err)
		}
		if st.SiblingIsLeft {
			acc = merkleNode(sib, acc)
		} else {
			acc = merkleNode(acc, sib)
		}
	}
	if acc != root {
		return errors.New("inclusion proof does not recompute the root")
	}
	return nil
}

// CompareFrameIDs is the canonical FrameId order (§6.3): provider_id, then
// frame_id, then content_digest with absent before any present value, all
// byte-wise.
func CompareFrameIDs(a, b FrameID) int {
	if c := strings.Compare(a.ProviderID, b.ProviderID); c != 0 {
		return c
	}
	if c := strings.Compare(a.FrameID, b.FrameID); c != 0 {
		return c
	}
	switch {
	case a.ContentDigest == nil && b.ContentDigest == nil:
		return 0
	case a.ContentDigest == nil:
		return -1
	case b.ContentDigest == nil:
		return 1
	}
	return strings.Compare(*a.ContentDigest, *b.ContentDigest)
}

// Signer produces §6.5 attestations with one Ed25519 key.
type Signer struct {
	Key        ed25519.PrivateKey
	KeyID      string
	AttesterID string
}

// PublicKey returns the published AttesterKey for s.
func (s *Signer) PublicKey() AttesterKey {
	pub := s.Key.Public().(ed25519.PublicKey)
	return AttesterKey{KeyID: s.KeyID, Algorithm: AlgorithmEd25519, PublicKey: hex.EncodeToString(pub)}
}

// Sign signs the 32 raw commitment bytes (not the "sha256:" string; the
// published vector only reproduces this way). issuedAt is not signed (F18).
func (s *Signer) Sign(commitment [32]byte, issuedAt string) Attestation {
	sig := ed25519.Sign(s.Key, commitment[:])
	return Attestation{
		SignedCommitment: Digest(commitment),
		KeyID:            s.KeyID,
		Algorithm:        AlgorithmEd25519,
		AttesterID:       s.AttesterID,
		Signature:        hex.EncodeToString(sig),
		IssuedAt:         issuedAt,
	}
}

// Attest computes the detached evidence for exactly the frames of a result
// (F12): a signature over every frame commitment, an inclusion proof per
// frame and a signature over the Merkle root, all in canonical order. A frame
// without a content_digest is refused (F14) rather than signed identity-only.
func (s *Signer) Attest(providerID string, frames []Frame, issuedAt string) ([]FrameAttestation, *Attestation, error) {
	type leaf struct {
		id FrameID
		c  [32]byte
	}
	leaves := make([]leaf, len(frames))
	for i, f := range frames {
		if f.ContentDigest == nil {
			return nil, nil, fmt.Errorf("frame %q has no content_digest; refusing to sign identity only (F14)", f.ID)
		}
		leaves[i] = leaf{
			id: FrameID{ProviderID: providerID, FrameID: f.ID, ContentDigest: f.ContentDigest},
			c:  FrameCommitment(providerID, f.ID, f.ContentDigest, f.Provenance),
		}
	}
	sort.SliceStable(leaves, func(i, j int) bool { return CompareFrameIDs(leaves[i].id, leaves[j].id) < 0 })
	cs := make([][32]byte, len(leaves))
	for i, l := range leaves {
		cs[i] = l.c
	}
	root := s.Sign(MerkleRoot(cs), issuedAt)
	out := make([]FrameAttestation, len(leaves))
	for i, l := range leaves {
		a := s.Sign(l.c, issuedAt)
		out[i] = FrameAttestation{
			Frame:          l.id,
			Attestation:    &a,
			InclusionProof: &InclusionProof{LeafIndex: i, LeafCount: len(leaves), Path: InclusionPath(cs, i)},
		}
	}
	return out, &root, nil
}

// Verification outcomes, in the order a verifier establishes them: the
// commitment is recomputed before the signature is checked, so tampering is
// reported as a mismatch rather than a bad signature.
var (
	ErrCommitmentMismatch = errors.New("commitment mismatch")
	ErrBadSignature       = errors.New("bad signature")
	ErrUncheckable        = errors.New("uncheckable attestation")
)

// VerifyAttestation checks a attestation against an expected commitment and
// a published key, strictly (§6.5.4): unknown algorithms are uncheckable
// (F8) and small-order or non-canonical keys are refused.
func VerifyAttestation(a Attestation, expected [32]byte, key AttesterKey) error {
	if a.Algorithm != AlgorithmEd25519 || key.Algorithm != AlgorithmEd25519 {
		return fmt.Errorf("%w: algorithm %q", ErrUncheckable, a.Algorithm)
	}
	if a.SignedCommitment != Digest(expected) {
		return fmt.Errorf("%w: signed %s, recomputed %s", ErrCommitmentMismatch, a.SignedCommitment, Digest(expected))
	}
	pub, err := hex.DecodeString(key.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key is not 32 bytes of hex", ErrUncheckable)
	}
	if isWeakKey(pub) {
		return fmt.Errorf("%w: small-order or non-canonical public key", ErrBadSignature)
	}
	sig, err := hex.DecodeString(a.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize || a.Signature != strings.ToLower(a.Signature) {
		return fmt.Errorf("%w: signature is not 64 bytes of lowercase hex", ErrBadSignature)
	}
	if !ed25519.Verify(pub, expected[:], sig) {
		return ErrBadSignature
	}
	return nil
}

// isWeakKey refuses the points with 8P = identity and the non-canonical
// encodings listed in attestation-vectors.json#/verifier_strictness, which
// Go's ed25519.Verify would accept, plus every other y >= p.
func isWeakKey(pub []byte) bool {
	switch hex.EncodeToString(pub) {
	case "0000000000000000000000000000000000000000000000000000000000000000",
		"0000000000000000000000000000000000000000000000000000000000000080",
		"0100000000000000000000000000000000000000000000000000000000000000",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f":
		return true
	}
	// y >= p = 2^255-19 once the sign bit is masked: 0xed..0xff, then 30
	// bytes of 0xff, then 0x7f.
	if pub[0] < 0xed || pub[31]&0x7f != 0x7f {
		return false
	}
	for i := 1; i < 31; i++ {
		if pub[i] != 0xff {
			return false
		}
	}
	return true
}
