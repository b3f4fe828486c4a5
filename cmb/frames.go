package cmb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cmbnode/cmbnode/group"
)

// Frame type names (MMP §7.1).
const (
	TypeHandshake   = "handshake"
	TypeCMB         = "cmb"
	TypeFetch       = "cmb-fetch"
	TypeFetchResult = "cmb-fetch-result"
	TypePing        = "ping"
	TypePong        = "pong"
	TypePeerInfo    = "peer-info"
	TypeError       = "error"
)

// ProtocolVersion is what cmbnode sends in its handshake (§14 A4).
const ProtocolVersion = "1.1.0"

// Frame is a decoded MMP frame.
type Frame interface{ FrameType() string }

// ErrDiscard marks a payload MMP says to drop silently: not JSON, not an
// object, no string type, or a known type whose members are malformed. The
// connection stays up (§4.1).
var ErrDiscard = errors.New("frame discarded")

// Unknown is a frame of a type this node does not speak; callers ignore it.
type Unknown struct{ Type string }

func (f *Unknown) FrameType() string { return f.Type }

// Handshake is the first frame on every connection (§5.2, §20.1).
type Handshake struct {
	NodeID        string   `json:"nodeId"`
	Name          string   `json:"name"`
	Version       string   `json:"version"`
	PublicKey     string   `json:"publicKey"`
	E2EPublicKey  string   `json:"e2ePublicKey,omitempty"`
	Group         string   `json:"group,omitempty"`
	LifecycleRole string   `json:"lifecycleRole,omitempty"`
	Extensions    []string `json:"extensions,omitempty"`
	// CmbnodeVersion is the sender's cmbnode build (a vendor member, which
	// the schema's additionalProperties allows and other nodes ignore).
	CmbnodeVersion string `json:"x-cmbnode-version,omitempty"`
}

func (*Handshake) FrameType() string { return TypeHandshake }

var semver = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)$`)

// Validate checks a received handshake: identity grammar, key size, a version
// in a family we speak (1.x, and the reference runtime's 0.2.x), group grammar.
// It returns the error code to send before closing.
func (h *Handshake) Validate() (code int, err error) {
	if err := ValidateNodeID(h.NodeID); err != nil {
		return CodeAuthFailed, err
	}
	if err := ValidateName(h.Name); err != nil {
		return CodeAuthFailed, err
	}
	m := semver.FindStringSubmatch(h.Version)
	if m == nil {
		return CodeVersionMismatch, fmt.Errorf("handshake version %q is not x.y.z", Truncate(h.Version, 32))
	}
	if !(m[1] == "1" || (m[1] == "0" && m[2] == "2")) {
		return CodeVersionMismatch, fmt.Errorf("handshake version %s is not in a family this node speaks (1.x, 0.2.x)", h.Version)
	}
	if _, err := ParsePublicKey(h.PublicKey); err != nil {
		return CodeAuthFailed, fmt.Errorf("handshake publicKey: %w", err)
	}
	if h.Group != "" {
		if err := group.Validate(h.Group); err != nil {
			return CodeGroupMismatch, err
		}
	}
	switch h.LifecycleRole {
	case "", "participant", "validator", "anchor":
	default:
		return CodeAuthFailed, fmt.Errorf("handshake lifecycleRole %q is not participant, validator or anchor", Truncate(h.LifecycleRole, 32))
	}
	return 0, nil
}

// CMBFrame carries one record (§7.1). PublicKey and E2EPublicKey are the
// author's keys, which cmbnode adds so members that never met the author can
// verify it; they bind nothing by themselves (the roster pins them).
type CMBFrame struct {
	Timestamp    int64   `json:"timestamp"`
	To           string  `json:"to,omitempty"`
	Directed     bool    `json:"directed,omitempty"`
	CMB          *Record `json:"cmb"`
	PublicKey    string  `json:"publicKey,omitempty"`
	E2EPublicKey string  `json:"e2ePublicKey,omitempty"`
	// RawCMB, when set, is CMB.Encode()'s bytes: MarshalFrame writes them
	// as they are instead of encoding CMB again. Parsing never sets it.
	RawCMB []byte `json:"-"`
}

func (*CMBFrame) FrameType() string { return TypeCMB }

// Fetch asks a peer for the record stored under exactly Key (§7.1).
type Fetch struct {
	ReqID     string `json:"reqId"`
	Key       string `json:"key"`
	From      string `json:"from,omitempty"`
	Timestamp int64  `json:"timestamp,omitempty"`
}

func (*Fetch) FrameType() string { return TypeFetch }

// FetchResult answers a Fetch. The requester recomputes the address of CMB
// and treats a mismatch as a miss.
type FetchResult struct {
	ReqID     string  `json:"reqId"`
	Key       string  `json:"key"`
	Found     bool    `json:"found"`
	CMB       *Record `json:"cmb"`
	Timestamp int64   `json:"timestamp,omitempty"`
	// PublicKey is the author's key (cmbnode extension, as on CMBFrame).
	PublicKey    string `json:"publicKey,omitempty"`
	E2EPublicKey string `json:"e2ePublicKey,omitempty"`
}

func (*FetchResult) FrameType() string { return TypeFetchResult }

// Ping and Pong are the heartbeat (§5.4).
type Ping struct{}
type Pong struct{}

func (*Ping) FrameType() string { return TypePing }
func (*Pong) FrameType() string { return TypePong }

// PeerInfo gossips known peers (§5.6).
type PeerInfo struct {
	Peers []PeerEntry `json:"peers"`
}

// PeerEntry is one peer in a PeerInfo frame.
type PeerEntry struct {
	NodeID   string `json:"nodeId"`
	Name     string `json:"name"`
	LastSeen int64  `json:"lastSeen,omitempty"`
	// Addrs are libp2p multiaddrs (cmbnode extension) so peers can dial each other.
	Addrs []string `json:"addrs,omitempty"`
}

func (*PeerInfo) FrameType() string { return TypePeerInfo }

// ErrorFrame is informational; receivers never act on it as a command (§7.2).
type ErrorFrame struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Detail  string `json:"detail,omitempty"`
}

func (*ErrorFrame) FrameType() string { return TypeError }

// ParseFrame decodes one frame payload. A payload to drop silently returns an
// error wrapping ErrDiscard; an unknown type returns *Unknown and no error.
func ParseFrame(payload []byte) (Frame, error) {
	if len(payload) == 0 || payload[0] != '{' {
		return nil, fmt.Errorf("%w: payload is not a JSON object", ErrDiscard)
	}
	if f, ok, err := parseCMBFrame(payload); ok {
		return f, err
	}
	// Declared here, not above: json.Unmarshal moves it to the heap, which
	// a cmb frame has no need of.
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(payload, &head); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDiscard, err)
	}
	if head.Type == nil {
		return nil, fmt.Errorf("%w: no string type member", ErrDiscard)
	}
	var f Frame
	switch *head.Type {
	case TypeHandshake:
		f = &Handshake{}
	case TypeCMB:
		f = &CMBFrame{}
	case TypeFetch:
		f = &Fetch{}
	case TypeFetchResult:
		f = &FetchResult{}
	case TypePing:
		return &Ping{}, nil
	case TypePong:
		return &Pong{}, nil
	case TypePeerInfo:
		f = &PeerInfo{}
	case TypeError:
		f = &ErrorFrame{}
	default:
		return &Unknown{Type: *head.Type}, nil
	}
	if err := json.Unmarshal(payload, f); err != nil {
		return nil, fmt.Errorf("%w: %s frame: %v", ErrDiscard, *head.Type, err)
	}
	switch x := f.(type) {
	case *CMBFrame:
		if x.CMB == nil {
			return nil, fmt.Errorf("%w: cmb frame without a cmb", ErrDiscard)
		}
	case *Fetch:
		if x.ReqID == "" || x.Key == "" {
			return nil, fmt.Errorf("%w: cmb-fetch needs reqId and key", ErrDiscard)
		}
	case *FetchResult:
		if x.ReqID == "" || x.Key == "" {
			return nil, fmt.Errorf("%w: cmb-fetch-result needs reqId and key", ErrDiscard)
		}
	case *Handshake:
		if x.NodeID == "" || x.Name == "" || x.Version == "" || x.PublicKey == "" {
			return nil, fmt.Errorf("%w: handshake needs nodeId, name, version and publicKey", ErrDiscard)
		}
	}
	return f, nil
}

// MarshalFrame encodes a frame as a minified JSON object with its type first.
func MarshalFrame(f Frame) ([]byte, error) {
	n := 256
	if x, ok := f.(*CMBFrame); ok && x.RawCMB != nil {
		n += len(x.RawCMB)
	} else if ok && x.CMB != nil {
		n += x.CMB.sizeHint()
	}
	b := make([]byte, 0, n)
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, f.FrameType())
	switch x := f.(type) {
	case *Ping, *Pong:
		return append(b, '}'), nil
	case *Unknown:
		return nil, fmt.Errorf("marshal frame: cannot send unknown type %q", f.FrameType())
	case *CMBFrame:
		return appendCMBFrame(b, x), nil
	}
	body, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("marshal %s frame: %w", f.FrameType(), err)
	}
	if len(body) > 2 { // "{}" has no members to splice in
		b = append(b, ',')
		b = append(b, body[1:]...)
	} else {
		b = append(b, '}')
	}
	return b, nil
}

// parseCMBFrame is ParseFrame of a valid cmb frame (ok false for anything
// else), in one pass: the frame is validated once and its record decoded
// from its bytes, instead of the frame being parsed for its type, again
// for its members, and the record a third time. Members are matched as
// json.Unmarshal matches a struct's (names folded, the last one winning).
func parseCMBFrame(payload []byte) (_ Frame, ok bool, _ error) {
	var ends valueEnds
	if !validJSON(payload, &ends) {
		return nil, false, nil
	}
	var typ []byte
	// In order, repeats kept; on the stack for a frame as cmbnode writes it.
	var cmbBuf [1][]byte
	var restBuf [6]member
	cmbRaws, rest := cmbBuf[:0], restBuf[:0]
	eachMemberEnds(payload, &ends, func(name string, v []byte) {
		switch {
		case strings.EqualFold(name, "type"):
			typ = v
		case strings.EqualFold(name, "cmb"):
			cmbRaws = append(cmbRaws, v)
		default:
			rest = append(rest, member{name, v})
		}
	})
	if !isKind(typ, '"') || unquote(typ) != TypeCMB {
		return nil, false, nil
	}
	// The frame and its record are allocated together.
	both := &struct {
		f CMBFrame
		r Record
	}{}
	f := &both.f
	for _, m := range rest {
		var dst any
		switch name := m.name; {
		case strings.EqualFold(name, "timestamp"):
			dst = &f.Timestamp
		case strings.EqualFold(name, "to"):
			dst = &f.To
		case strings.EqualFold(name, "directed"):
			dst = &f.Directed
		case strings.EqualFold(name, "publicKey"):
			dst = &f.PublicKey
		case strings.EqualFold(name, "e2ePublicKey"):
			dst = &f.E2EPublicKey
		default:
			continue
		}
		if isKind(m.v, '"') {
			if p, isStr := dst.(*string); isStr {
				*p = unquote(m.v)
				continue
			}
		}
		// The common literals are read as json.Unmarshal would read them
		// (the payload is valid JSON, so digits are a JSON integer), without
		// its reflection; anything else goes to it.
		switch p := dst.(type) {
		case *int64:
			if isDigits(m.v) {
				if v, err := strconv.ParseInt(string(m.v), 10, 64); err == nil {
					*p = v
					continue
				}
			}
		case *bool:
			if lit := string(m.v); lit == "true" || lit == "false" {
				*p = lit == "true"
				continue
			}
		}
		if err := json.Unmarshal(m.v, dst); err != nil {
			return nil, true, fmt.Errorf("%w: cmb frame: %v", ErrDiscard, err)
		}
	}
	// Each cmb member is decoded in turn, as json.Unmarshal would: any
	// that fails fails the frame, a null one unsets the record.
	var rec *Record
	var recRaw, recCopy []byte
	for _, raw := range cmbRaws {
		var err error
		switch {
		case string(raw) == "null":
			rec = nil
		case isKind(raw, '{'):
			both.r = Record{}
			rec, recRaw, recCopy = &both.r, raw, bytes.Clone(raw)
			err = decodeValidInto(rec, raw, false, &ends, &textCopy{src: raw, copy: recCopy})
		default:
			_, err = Decode(raw) // the record's own decoder refuses it
		}
		if err != nil {
			return nil, true, fmt.Errorf("%w: cmb frame: %v", ErrDiscard, err)
		}
	}
	if rec == nil {
		return nil, true, fmt.Errorf("%w: cmb frame without a cmb", ErrDiscard)
	}
	// A record sent as Encode writes it keeps those bytes (a copy: the
	// payload may be a reused buffer), for Canonical to return instead of
	// encoding the record again, and its texts are read from the copy
	// rather than copied each; anything else is encoded when asked, and
	// its texts get bytes of their own, so that they do not keep the copy
	// (and its other members, copied apart) alive.
	if rec.encodes(recRaw) {
		rec.enc = recCopy
	} else {
		for i := range rec.Fields {
			rec.Fields[i].Text = strings.Clone(rec.Fields[i].Text)
		}
	}
	f.CMB = rec
	return f, true, nil
}

// appendCMBFrame is json.Marshal's encoding of f's members, the record
// written once: through json.Marshal, the record's own encoding would be
// scanned and copied again (encoding/json compacts what a Marshaler
// returns). The JSON values are the same; only json.Marshal's escaping of
// <, > and & in the record's texts, which JSON does not need, is left out.
func appendCMBFrame(b []byte, f *CMBFrame) []byte {
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, f.Timestamp, 10)
	if f.To != "" {
		b = append(b, `,"to":`...)
		b = appendString(b, f.To)
	}
	if f.Directed {
		b = append(b, `,"directed":true`...)
	}
	b = append(b, `,"cmb":`...)
	switch {
	case f.RawCMB != nil:
		b = append(b, f.RawCMB...)
	case f.CMB == nil:
		b = append(b, "null"...)
	default:
		b = f.CMB.AppendJSON(b)
	}
	if f.PublicKey != "" {
		b = append(b, `,"publicKey":`...)
		b = appendString(b, f.PublicKey)
	}
	if f.E2EPublicKey != "" {
		b = append(b, `,"e2ePublicKey":`...)
		b = appendString(b, f.E2EPublicKey)
	}
	return append(b, '}')
}

// isDigits reports raw is an optional minus sign and decimal digits.
func isDigits(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
