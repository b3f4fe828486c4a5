package cmb

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// Address prefixes (MMP §8.2.1). cmb1- is minted; legacy cmb- is verify-only.
const (
	PrefixV1     = "cmb1-"
	PrefixLegacy = "cmb-"
	KeyLenV1     = len(PrefixV1) + 64     // 69
	KeyLenLegacy = len(PrefixLegacy) + 32 // 36
)

// Scheme names an address scheme, chosen by prefix and digest length (§14 A17).
type Scheme int

const (
	SchemeUnknown Scheme = iota
	SchemeV1             // cmb1- + 64 lowercase hex
	SchemeLegacy         // cmb- + 32 lowercase hex
)

// SchemeOf classifies a key by prefix and length. Anything else, including
// v2's cmb- + 64 hex, is SchemeUnknown: never reinterpret one as another.
func SchemeOf(key string) Scheme {
	switch {
	case len(key) == KeyLenV1 && key[:len(PrefixV1)] == PrefixV1 && isLowerHex(key[len(PrefixV1):]):
		return SchemeV1
	case len(key) == KeyLenLegacy && key[:len(PrefixLegacy)] == PrefixLegacy && isLowerHex(key[len(PrefixLegacy):]):
		return SchemeLegacy
	}
	return SchemeUnknown
}

// ValidateKey checks that key is a well-formed address of a known scheme.
func ValidateKey(key string) error {
	if SchemeOf(key) == SchemeUnknown {
		return newError(ReasonBadAddress, fmt.Sprintf("%q is neither cmb1-<64 hex> nor cmb-<32 hex>", Truncate(key, 80)), nil)
	}
	return nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
			return false
		}
	}
	return true
}

var addrTag = []byte("mmp-cmb-v1\n")

// AddressV1 computes the cmb1- key of seven field texts (spec order). With no
// parents the role is root; with parents it is remix, binding the sorted
// parent set and the remixing node (receiver = the remix's createdBy, §14 A2).
// Texts are NFC-normalised here, so callers may pass wire text as received.
func AddressV1(texts *[NumFields]string, parents []string, receiver string) string {
	return addressV1(texts, parents, receiver, false)
}

// addressV1 is AddressV1; normalised says the texts are NFC already (Build
// made them so), and are not scanned again.
func addressV1(texts *[NumFields]string, parents []string, receiver string, normalised bool) string {
	// The preimage is built in a recycled buffer, not on the stack: a
	// gossip validator runs on a fresh goroutine per message, whose stack
	// a 4 KB frame here made grow (and be copied) for every record.
	bp := preimages.Get().(*[]byte)
	buf := append((*bp)[:0], addrTag...)
	for i := range texts {
		// norm's String returns a text already in NFC (the common case)
		// as it is, allocating nothing; its IsNormalString allocates on
		// every call.
		t := texts[i]
		if !normalised {
			t = norm.NFC.String(t)
		}
		buf = AppendLP(buf, t)
	}
	if len(parents) == 0 {
		buf = AppendLP(buf, "root")
	} else {
		buf = AppendLP(buf, "remix")
		buf = AppendLP(buf, strconv.Itoa(len(parents)))
		sorted := parents
		if !slices.IsSorted(parents) {
			sorted = slices.Clone(parents)
			slices.Sort(sorted) // bytewise on UTF-8: Go string order
		}
		for _, p := range sorted {
			buf = AppendLP(buf, p)
		}
		buf = AppendLP(buf, receiver)
	}
	sum := sha256.Sum256(buf)
	if cap(buf) <= maxPooledPreimage {
		*bp = buf[:0]
		preimages.Put(bp)
	}
	var out [KeyLenV1]byte
	copy(out[:], PrefixV1)
	hex.Encode(out[len(PrefixV1):], sum[:])
	return string(out[:])
}

// preimages recycles AddressV1's preimage buffers; one of a record of
// long texts (past maxPooledPreimage) is left to the collector.
var preimages = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledPreimage = 64 << 10

// AddressLegacy computes the verify-only legacy cmb- key: the first 32 hex of
// SHA-256 over the pipe-joined texts, with no normalisation (MMP §8.2.1).
func AddressLegacy(texts *[NumFields]string) string {
	h := sha256.New()
	for i := range texts {
		if i > 0 {
			h.Write([]byte{'|'})
		}
		h.Write([]byte(texts[i]))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return PrefixLegacy + hex.EncodeToString(sum[:16])
}

// ComputeKey recomputes the record's address with the scheme its key names.
func (r *Record) ComputeKey() (string, error) {
	if r.IsSealed() {
		return "", newError(ReasonSealed, "open the record before recomputing its address", nil)
	}
	texts := r.Fields.Texts()
	switch SchemeOf(r.Key) {
	case SchemeV1:
		return AddressV1(&texts, r.Parents(), r.CreatedBy), nil
	case SchemeLegacy:
		return AddressLegacy(&texts), nil
	}
	return "", ValidateKey(r.Key)
}

// VerifyAddress checks that the key matches the fields (and, for a remix, the
// parent set and author). A valid signature over swapped content fails here.
func (r *Record) VerifyAddress() error {
	want, err := r.ComputeKey()
	if err != nil {
		return err
	}
	if want != r.Key {
		return newError(ReasonAddressMismatch, fmt.Sprintf("key %s does not match the content, which addresses to %s", r.Key, want), nil)
	}
	return nil
}

// Truncate cuts s to n bytes and an ellipsis, so an error that quotes a
// received member stays short whatever the sender put there.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
