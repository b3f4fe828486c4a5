package cgp

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

const fixtureDir = "../../fixtures/cgp"

func readFixture(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

type attestVectors struct {
	Links            map[string]Link   `json:"links"`
	LinkEncodingsHex map[string]string `json:"link_encodings_hex"`
	ChainHeads       map[string]string `json:"chain_heads"`
	FrameCommitment  struct {
		ProviderID string `json:"provider_id"`
		Frame      struct {
			ID            string   `json:"id"`
			ContentDigest string   `json:"content_digest"`
			Provenance    []string `json:"provenance"`
		} `json:"frame"`
		Commitment string `json:"commitment"`
	} `json:"frame_commitment"`
	Merkle struct {
		ProviderID string `json:"provider_id"`
		LeafFrames []struct {
			ID            string `json:"id"`
			ContentDigest string `json:"content_digest"`
			Provenance    []Link `json:"provenance"`
		} `json:"leaf_frames"`
		Roots          map[string]string `json:"roots_by_leaf_count"`
		InclusionProof InclusionProof    `json:"inclusion_proof"`
	} `json:"merkle"`
	Signature struct {
		Seed        string      `json:"signing_key_seed_hex"`
		PublicKey   string      `json:"public_key_hex"`
		Attestation Attestation `json:"attestation"`
	} `json:"signature"`
	Strictness struct {
		SmallOrder   []string `json:"small_order_public_keys_hex"`
		NonCanonical []string `json:"non_canonical_public_keys_hex"`
	} `json:"verifier_strictness"`
}

func TestAttestationVectors(t *testing.T) {
	var v attestVectors
	readFixture(t, "attestation-vectors.json", &v)

	for name, want := range v.LinkEncodingsHex {
		if got := hex.EncodeToString(EncodeLink(v.Links[name])); got != want {
			t.Errorf("link %s encodes to %s, want %s", name, got, want)
		}
	}
	// Absent and empty are different values (spec §8.1 examples).
	empty := ""
	if got := hex.EncodeToString(EncodeLink(Link{Type: "file"})); got != "0000000466696c650000000000" {
		t.Errorf("absent uri: %s", got)
	}
	if got := hex.EncodeToString(EncodeLink(Link{Type: "file", URI: &empty})); got != "0000000466696c65010000000000000000" {
		t.Errorf("empty uri: %s", got)
	}

	heads := map[string][]Link{
		"empty":                nil,
		"file":                 {v.Links["file"]},
		"file_then_derivation": {v.Links["file"], v.Links["derivation"]},
		"unicode":              {v.Links["unicode"]},
	}
	for name, links := range heads {
		if got := Digest(ChainHead(links)); got != v.ChainHeads[name] {
			t.Errorf("chain head %s = %s, want %s", name, got, v.ChainHeads[name])
		}
	}

	fc := v.FrameCommitment
	var prov []Link
	for _, n := range fc.Frame.Provenance {
		prov = append(prov, v.Links[n])
	}
	commit := FrameCommitment(fc.ProviderID, fc.Frame.ID, &fc.Frame.ContentDigest, prov)
	if got := Digest(commit); got != fc.Commitment {
		t.Fatalf("frame commitment %s, want %s", got, fc.Commitment)
	}

	var leaves [][32]byte
	for _, f := range v.Merkle.LeafFrames {
		d := f.ContentDigest
		leaves = append(leaves, FrameCommitment(v.Merkle.ProviderID, f.ID, &d, f.Provenance))
	}
	for n, want := range map[int]string{0: v.Merkle.Roots["0"], 1: v.Merkle.Roots["1"], 3: v.Merkle.Roots["3"], 4: v.Merkle.Roots["4"], 7: v.Merkle.Roots["7"]} {
		if got := Digest(MerkleRoot(leaves[:n])); got != want {
			t.Errorf("root over %d leaves = %s, want %s", n, got, want)
		}
	}
	ip := v.Merkle.InclusionProof
	path := InclusionPath(leaves[:ip.LeafCount], ip.LeafIndex)
	gotPath, _ := json.Marshal(path)
	wantPath, _ := json.Marshal(ip.Path)
	if string(gotPath) != string(wantPath) {
		t.Errorf("inclusion path\n got %s\nwant %s", gotPath, wantPath)
	}
	root := MerkleRoot(leaves[:ip.LeafCount])
	if err := VerifyInclusion(leaves[ip.LeafIndex], ip, root); err != nil {
		t.Errorf("published proof does not verify: %v", err)
	}
	if err := VerifyInclusion(leaves[ip.LeafIndex+1], ip, root); err == nil {
		t.Error("proof verified for the wrong leaf")
	}

	seed, _ := hex.DecodeString(v.Signature.Seed)
	s := &Signer{Key: ed25519.NewKeyFromSeed(seed), KeyID: v.Signature.Attestation.KeyID, AttesterID: v.Signature.Attestation.AttesterID}
	if got := s.PublicKey().PublicKey; got != v.Signature.PublicKey {
		t.Fatalf("public key %s, want %s", got, v.Signature.PublicKey)
	}
	if got := s.Sign(commit, v.Signature.Attestation.IssuedAt); got != v.Signature.Attestation {
		t.Fatalf("attestation\n got %+v\nwant %+v", got, v.Signature.Attestation)
	}
	if err := VerifyAttestation(v.Signature.Attestation, commit, s.PublicKey()); err != nil {
		t.Fatalf("published attestation does not verify: %v", err)
	}
	forged := v.Signature.Attestation
	forged.Signature = "00" + forged.Signature[2:]
	if err := VerifyAttestation(forged, commit, s.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("forged signature: %v", err)
	}
	if err := VerifyAttestation(v.Signature.Attestation, leaves[0], s.PublicKey()); !errors.Is(err, ErrCommitmentMismatch) {
		t.Errorf("wrong commitment: %v", err)
	}
	alien := v.Signature.Attestation
	alien.Algorithm = "pq-future"
	if err := VerifyAttestation(alien, commit, s.PublicKey()); !errors.Is(err, ErrUncheckable) {
		t.Errorf("unknown algorithm: %v", err)
	}
	for _, k := range append(v.Strictness.SmallOrder, v.Strictness.NonCanonical...) {
		b, _ := hex.DecodeString(k)
		if !isWeakKey(b) {
			t.Errorf("weak key %s accepted", k)
		}
	}
	if isWeakKey(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)) {
		t.Error("vector key refused as weak")
	}
}

func TestMerkleProofsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 33; n++ {
		cs := make([][32]byte, n)
		for i := range cs {
			for j := range cs[i] {
				cs[i][j] = byte(rng.IntN(256))
			}
		}
		root := MerkleRoot(cs)
		for i := 0; i < n; i++ {
			p := InclusionProof{LeafIndex: i, LeafCount: n, Path: InclusionPath(cs, i)}
			if err := VerifyInclusion(cs[i], p, root); err != nil {
				t.Fatalf("n=%d i=%d: %v", n, i, err)
			}
		}
		bad := InclusionProof{LeafIndex: n, LeafCount: n}
		if VerifyInclusion(cs[0], bad, root) == nil {
			t.Fatalf("n=%d: leaf_index == leaf_count accepted", n)
		}
	}
}

func TestAttestCanonicalOrderAndF14(t *testing.T) {
	s := &Signer{Key: ed25519.NewKeyFromSeed(make([]byte, 32)), KeyID: "k", AttesterID: "a"}
	d1, d2 := DigestBytes([]byte("x")), DigestBytes([]byte("y"))
	frames := []Frame{{ID: "b", ContentDigest: &d1}, {ID: "a", ContentDigest: &d2}, {ID: "c", ContentDigest: &d1}}
	fa, root, err := s.Attest("p", frames, "2026-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	shuffled := []Frame{frames[2], frames[0], frames[1]}
	_, root2, _ := s.Attest("p", shuffled, "2026-01-01T00:00:00Z")
	if root.SignedCommitment != root2.SignedCommitment {
		t.Error("shuffling frames changed the root")
	}
	if fa[0].Frame.FrameID != "a" || fa[2].Frame.FrameID != "c" {
		t.Errorf("attestations not in canonical order: %v %v %v", fa[0].Frame.FrameID, fa[1].Frame.FrameID, fa[2].Frame.FrameID)
	}
	_, root3, _ := s.Attest("p", frames[:2], "2026-01-01T00:00:00Z")
	if root3.SignedCommitment == root.SignedCommitment {
		t.Error("root over a truncated set equals the full root")
	}
	if _, _, err := s.Attest("p", []Frame{{ID: "nodigest"}}, "2026-01-01T00:00:00Z"); err == nil {
		t.Error("signed a frame without content_digest (F14)")
	}
	// Absent digest sorts before any present one.
	if CompareFrameIDs(FrameID{ProviderID: "p", FrameID: "a"}, FrameID{ProviderID: "p", FrameID: "a", ContentDigest: &d1}) >= 0 {
		t.Error("absent digest does not sort first")
	}
}

func TestRangeVectors(t *testing.T) {
	var v struct {
		Resources map[string]string `json:"resources"`
		Cases     []struct {
			Resource     string  `json:"resource"`
			Range        *string `json:"range"`
			Bytes        *string `json:"bytes"`
			Digest       string  `json:"digest"`
			Unverifiable string  `json:"unverifiable"`
		} `json:"cases"`
	}
	readFixture(t, "range-vectors.json", &v)
	reasons := map[string]error{"unrecognised": ErrRangeUnrecognised, "inverted": ErrRangeInverted, "start_past_end": ErrRangeStartPastEnd}
	for _, c := range v.Cases {
		name := c.Resource + "/<absent>"
		if c.Range != nil {
			name = c.Resource + "/" + *c.Range
		}
		got, err := AddressRange([]byte(v.Resources[c.Resource]), c.Range)
		if c.Unverifiable != "" {
			if !errors.Is(err, reasons[c.Unverifiable]) {
				t.Errorf("%s: err %v, want %s", name, err, c.Unverifiable)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if string(got) != *c.Bytes || DigestBytes(got) != c.Digest {
			t.Errorf("%s: got %q (%s), want %q (%s)", name, got, DigestBytes(got), *c.Bytes, c.Digest)
		}
	}
}

func TestTimestampGrammar(t *testing.T) {
	good := []string{"2026-07-01T00:00:00Z", "2026-07-01T00:00:00.5Z", "2024-02-29T23:59:59.123456789Z", "2026-06-30T23:59:60Z"}
	bad := []string{"2026-07-01T00:00:00+02:00", "2026-07-01t00:00:00Z", "2026-07-01 00:00:00Z", "2026-07-01T00:00:00z",
		"2025-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-04-31T00:00:00Z", "2026-07-01T24:00:00Z", "2026-07-01T00:00:00.Z", "2026-07-01T00:00Z", ""}
	for _, s := range good {
		if _, err := ParseTime(s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	for _, s := range bad {
		if IsTimestamp(s) {
			t.Errorf("%q accepted", s)
		}
	}
	a, _ := ParseTime("2026-07-01T00:00:00.5Z")
	b, _ := ParseTime("2026-07-01T00:00:00Z")
	if !a.After(b) {
		t.Error(".5Z is not after Z as an instant")
	}
}
