package cgp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ProtocolVersion is what we acknowledge. Hosts in any contextgraph/1.x
// family interoperate with it (H1); we never compare whole version strings.
const ProtocolVersion = "contextgraph/1.0"

// Envelope type tags (spec §2). CGP is not JSON-RPC: the tag is the only
// discriminator.
const (
	TypeHandshake    = "handshake"
	TypeHandshakeAck = "handshake_ack"
	TypeQuery        = "query"
	TypeFrames       = "frames"
	TypeVerify       = "verify"
	TypeVerified     = "verified"
	TypeShutdown     = "shutdown"
	TypeError        = "error"
)

// Frame kinds we serve. Only base kinds are emitted: old hosts decode kind
// as a closed enum.
const (
	KindMemory  = "memory"
	KindEpisode = "episode"
)

// Error codes (spec §10). The vocabulary is open; these are the ones we emit.
const (
	CodeBadRequest          = "bad_request"
	CodeUnsupportedKind     = "unsupported_kind"
	CodeIncompatibleVersion = "incompatible_version"
	CodeUnavailable         = "unavailable"
	CodeShuttingDown        = "shutting_down"
	CodeInternal            = "internal"
)

// Verdict statuses (spec §9).
const (
	StatusValid   = "valid"
	StatusStale   = "stale"
	StatusGone    = "gone"
	StatusUnknown = "unknown"
)

// Error is a protocol-level failure a Handler returns so the transport can
// answer with an `error` envelope carrying Code. Any other error a Handler
// returns is reported as `internal` without leaking its text.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds a protocol error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode reports the protocol code for err: the code of a wrapped *Error,
// else internal. The daemon's socket uses it to keep CGP codes intact when
// it relays a query answered by the Engine.
func ErrorCode(err error) string {
	var pe *Error
	if errors.As(err, &pe) && pe.Code != "" {
		return pe.Code
	}
	return CodeInternal
}

// DataFlow declares what the provider does with data (spec §4).
type DataFlow struct {
	Reads        bool     `json:"reads"`
	Writes       bool     `json:"writes"`
	Egress       bool     `json:"egress"`
	EgressScopes []string `json:"egress_scopes,omitempty"`
}

// ProviderInfo names the provider. Name is the wire provider id (D5) that
// enters every FrameId and attestation commitment, so it must stay stable.
type ProviderInfo struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	DataFlow DataFlow `json:"data_flow"`
}

// QueryCapability lists the kinds we serve; the first one is what the
// kinds-filter probe exercises.
type QueryCapability struct {
	Kinds []string `json:"kinds"`
}

// Capabilities is what the ack declares. Every declared capability obliges
// us to a checked behaviour (spec §3), so nothing here is aspirational.
type Capabilities struct {
	Query                 QueryCapability `json:"query"`
	Correlation           bool            `json:"correlation"`
	Graph                 bool            `json:"graph"`
	EmbeddingsFingerprint *string         `json:"embeddings_fingerprint,omitempty"`
	Verify                bool            `json:"verify"`
	Representations       []string        `json:"representations,omitempty"`
	Resolve               bool            `json:"resolve"`
}

// AttesterKey publishes the key attestations are signed with (§6.5.4).
type AttesterKey struct {
	KeyID     string `json:"key_id"`
	Algorithm string `json:"algorithm"`
	PublicKey string `json:"public_key"`
}

// HandshakeAck is the provider's answer to a handshake.
type HandshakeAck struct {
	Type            string        `json:"type"`
	ProtocolVersion string        `json:"protocol_version"`
	Provider        ProviderInfo  `json:"provider"`
	Capabilities    Capabilities  `json:"capabilities"`
	AttesterKeys    []AttesterKey `json:"attester_keys,omitempty"`
}

// ContextQuery is a decoded query payload. Only what we act on is kept;
// unknown members are dropped at decode time (U1).
type ContextQuery struct {
	Goal                      string    `json:"goal"`
	QueryText                 *string   `json:"query_text,omitempty"`
	Embedding                 []float64 `json:"embedding,omitempty"`
	Kinds                     []string  `json:"kinds,omitempty"`
	Anchors                   []string  `json:"anchors,omitempty"`
	MaxFrames                 uint32    `json:"max_frames"`
	MaxTokens                 uint32    `json:"max_tokens"`
	AsOf                      *string   `json:"as_of,omitempty"`
	RepresentationPreferences []string  `json:"representation_preferences,omitempty"`
}

// wireQuery mirrors ContextQuery with pointers so "absent" and "zero" can be
// told apart: max_frames/max_tokens are required, 0 is a legal budget.
type wireQuery struct {
	Goal                      *string          `json:"goal"`
	QueryText                 *string          `json:"query_text"`
	Embedding                 *json.RawMessage `json:"embedding"`
	Kinds                     []string         `json:"kinds"`
	Anchors                   []string         `json:"anchors"`
	MaxFrames                 *json.Number     `json:"max_frames"`
	MaxTokens                 *json.Number     `json:"max_tokens"`
	AsOf                      *string          `json:"as_of"`
	RepresentationPreferences []string         `json:"representation_preferences"`
}

// DecodeQuery decodes and validates a ContextQuery payload. Unknown members
// are ignored at any depth (U1); missing or out-of-range required members
// and a malformed as_of are bad_request. The daemon's socket uses it too, so
// a relayed query is validated exactly once, where it is answered.
func DecodeQuery(raw []byte) (*ContextQuery, error) {
	var w wireQuery
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, Errorf(CodeBadRequest, "query is not a valid ContextQuery: %v", err)
	}
	if w.Goal == nil || strings.TrimSpace(*w.Goal) == "" {
		return nil, Errorf(CodeBadRequest, "query.goal is required and must be non-empty")
	}
	q := &ContextQuery{Goal: *w.Goal, QueryText: w.QueryText, Kinds: w.Kinds, Anchors: w.Anchors,
		AsOf: w.AsOf, RepresentationPreferences: w.RepresentationPreferences}
	var err error
	if q.MaxFrames, err = decodeU32("max_frames", w.MaxFrames); err != nil {
		return nil, err
	}
	if q.MaxTokens, err = decodeU32("max_tokens", w.MaxTokens); err != nil {
		return nil, err
	}
	if w.Embedding != nil && string(*w.Embedding) != "null" {
		if err := json.Unmarshal(*w.Embedding, &q.Embedding); err != nil {
			return nil, Errorf(CodeBadRequest, "query.embedding must be an array of numbers")
		}
		if q.Embedding == nil {
			// An explicit [] is still an embedding the host sent.
			q.Embedding = []float64{}
		}
	}
	if q.AsOf != nil {
		if _, err := ParseTime(*q.AsOf); err != nil {
			return nil, Errorf(CodeBadRequest, "query.as_of: %v", err)
		}
	}
	return q, nil
}

func decodeU32(name string, n *json.Number) (uint32, error) {
	if n == nil {
		return 0, Errorf(CodeBadRequest, "query.%s is required", name)
	}
	var v uint64
	if _, err := fmt.Sscan(n.String(), &v); err != nil || fmt.Sprint(v) != n.String() || v > 0xFFFFFFFF {
		return 0, Errorf(CodeBadRequest, "query.%s must be an integer in 0..4294967295, got %s", name, n.String())
	}
	return uint32(v), nil
}

// Link is one provenance entry. Optional members are pointers because the
// §6.5.1 encoding distinguishes absent from empty.
type Link struct {
	Type   string  `json:"type"`
	URI    *string `json:"uri,omitempty"`
	Range  *string `json:"range,omitempty"`
	Digest *string `json:"digest,omitempty"`
	Method *string `json:"method,omitempty"`
	By     *string `json:"by,omitempty"`
}

// Relation is a graph edge from a frame (G1, G2).
type Relation struct {
	Rel         string `json:"rel"`
	TargetURI   string `json:"target_uri"`
	DisplayName string `json:"display_name"`
}

// Frame is a full-representation ContextFrame as we emit it. Content is a
// pointer so an empty body still travels (P1); token_cost, score and the
// other required members never use omitempty.
type Frame struct {
	ID            string     `json:"id"`
	Kind          string     `json:"kind"`
	Title         string     `json:"title"`
	Content       *string    `json:"content,omitempty"`
	ContentDigest *string    `json:"content_digest,omitempty"`
	URI           string     `json:"uri,omitempty"`
	Score         float64    `json:"score"`
	TokenCost     uint32     `json:"token_cost"`
	ValidFrom     string     `json:"valid_from,omitempty"`
	ValidTo       string     `json:"valid_to,omitempty"`
	RecordedAt    string     `json:"recorded_at,omitempty"`
	Provenance    []Link     `json:"provenance,omitempty"`
	CitationLabel string     `json:"citation_label,omitempty"`
	Relations     []Relation `json:"relations,omitempty"`
}

// FrameID is the identity triple (D1-D5). ContentDigest is a pointer: an
// absent digest sorts first in canonical order and encodes as 0x00 in a
// commitment, unlike "".
type FrameID struct {
	ProviderID    string  `json:"provider_id"`
	FrameID       string  `json:"frame_id"`
	ContentDigest *string `json:"content_digest,omitempty"`
}

// Attestation is a ProvenanceAttestation (§6.5). Only SignedCommitment is
// covered by the signature (F18).
type Attestation struct {
	SignedCommitment string `json:"signed_commitment"`
	KeyID            string `json:"key_id"`
	Algorithm        string `json:"algorithm"`
	AttesterID       string `json:"attester_id"`
	Signature        string `json:"signature"`
	IssuedAt         string `json:"issued_at"`
}

// InclusionStep is one level of an RFC 6962 audit path.
type InclusionStep struct {
	Sibling       string `json:"sibling"`
	SiblingIsLeft bool   `json:"sibling_is_left"`
}

// InclusionProof proves a frame commitment is a leaf of the result root.
type InclusionProof struct {
	LeafIndex int             `json:"leaf_index"`
	LeafCount int             `json:"leaf_count"`
	Path      []InclusionStep `json:"path"`
}

// FrameAttestation is the detached evidence for one carried frame (F6, F11).
type FrameAttestation struct {
	Frame          FrameID         `json:"frame"`
	Attestation    *Attestation    `json:"attestation,omitempty"`
	InclusionProof *InclusionProof `json:"inclusion_proof,omitempty"`
}

// ContextQueryResult is the payload of a frames envelope. Frames is never
// nil on the wire: Rust hosts reject null for a Vec.
type ContextQueryResult struct {
	Frames            []Frame            `json:"frames"`
	Truncated         bool               `json:"truncated"`
	DroppedEstimate   *uint32            `json:"dropped_estimate,omitempty"`
	FrameAttestations []FrameAttestation `json:"frame_attestations,omitempty"`
	ResultAttestation *Attestation       `json:"result_attestation,omitempty"`
	// Sync is present only while the provider is still receiving records
	// from its peers, so the answer may lack some. A vendor member (U3's
	// namespacing); hosts ignore members they do not know (U1).
	Sync *SyncNotice `json:"cmbnode:sync,omitempty"`
}

// SyncNotice says an answer was given while the provider was catching up:
// Received records of about Expected had arrived, from Peers peers.
type SyncNotice struct {
	Note     string `json:"note"`
	Received int64  `json:"received"`
	Expected int64  `json:"expected"`
	Peers    int    `json:"peers"`
}

// VerifyRequest carries identities only, never bodies.
type VerifyRequest struct {
	Frames []VerifyFrameID `json:"frames"`
}

// VerifyFrameID keeps the identity exactly as received so the verdict can
// echo it byte for byte, malformed values included (hosts match verdicts by
// full identity).
type VerifyFrameID struct {
	ProviderID    json.RawMessage `json:"provider_id"`
	FrameID       json.RawMessage `json:"frame_id"`
	ContentDigest json.RawMessage `json:"content_digest,omitempty"`
}

// Verdict is one FrameVerdict.
type Verdict struct {
	Frame             VerifyFrameID `json:"frame"`
	Status            string        `json:"status"`
	ReplacementDigest *string       `json:"replacement_digest,omitempty"`
}

// VerifyResponse answers a VerifyRequest; Verdicts is never nil on the wire.
type VerifyResponse struct {
	Verdicts []Verdict `json:"verdicts"`
}

// DecodeVerifyRequest decodes a verify payload, tolerating unknown members.
// Identities whose members are not JSON strings are kept verbatim for the
// echo; the Engine answers them `unknown`.
func DecodeVerifyRequest(raw []byte) (*VerifyRequest, error) {
	var r struct {
		Frames *[]json.RawMessage `json:"frames"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, Errorf(CodeBadRequest, "verify request is malformed: %v", err)
	}
	if r.Frames == nil {
		return nil, Errorf(CodeBadRequest, "verify request.frames is required")
	}
	out := &VerifyRequest{Frames: make([]VerifyFrameID, 0, len(*r.Frames))}
	for i, f := range *r.Frames {
		var id VerifyFrameID
		if err := json.Unmarshal(f, &id); err != nil {
			return nil, Errorf(CodeBadRequest, "verify request.frames[%d] is not a FrameId object", i)
		}
		if isJSONNull(id.ContentDigest) {
			// null and absent both mean "no digest"; echo as absent.
			id.ContentDigest = nil
		}
		out.Frames = append(out.Frames, id)
	}
	return out, nil
}

func isJSONNull(r json.RawMessage) bool { return strings.TrimSpace(string(r)) == "null" }

// rawString decodes a JSON string member, reporting false for anything else.
func rawString(r json.RawMessage) (string, bool) {
	if len(r) == 0 {
		return "", false
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", false
	}
	return s, true
}

// envelopes as we emit them.

type framesEnvelope struct {
	Type   string              `json:"type"`
	ID     string              `json:"id,omitempty"`
	Result *ContextQueryResult `json:"result"`
}

type verifiedEnvelope struct {
	Type     string          `json:"type"`
	ID       string          `json:"id,omitempty"`
	Response *VerifyResponse `json:"response"`
}

type errorEnvelope struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}
