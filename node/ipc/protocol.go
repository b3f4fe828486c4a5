// Package ipc is the daemon's local socket: the protocol agents, the CLI and
// the CGP provider use to reach the node (DESIGN "Local socket contract").
//
// One JSON object per message each way, as NDJSON lines, or — when the first
// byte a client sends is 0x00 — as 4-byte big-endian length-prefixed frames
// for the whole connection (the length of a message under the 1 MiB cap
// always starts with a zero byte, so the two cannot be confused). Replies
// are {"type":"result","action":…,"id":…}, failures {"type":"error",…},
// pushed events {"type":"event","event":…,"data":…}.
package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node"
)

// MaxMessage is the cap on one message in either direction.
const MaxMessage = 1 << 20

// Error codes of the socket contract.
const (
	CodeBadRequest     = "bad_request"
	CodeUnknownRequest = "unknown_request"
	CodeTooLarge       = "too_large"
	CodeRejected       = "rejected"
	CodeNotFound       = "not_found"
	CodeUnavailable    = "unavailable"
	CodeDiskFull       = "disk_full"
	CodeInternal       = "internal"
	// CodeCursorExpired refuses a listen `after` a cursor the daemon no
	// longer numbers (another run, or older than its ring).
	CodeCursorExpired = "cursor_expired"
)

// Request types of the socket contract.
const (
	TypeRemember = "remember"
	TypePublish  = "publish"
	TypeRecall   = "recall"
	TypeGet      = "get"
	TypeLineage  = "lineage"
	TypeQuery    = "query"
	TypeVerify   = "verify"
	TypeStatus   = "status"
	TypePeers    = "peers"
	TypeListen   = "listen"
	TypeRecent   = "recent"
	TypeThread   = "thread"
	TypeAuthors  = "authors"
	TypeExport   = "export"
	TypeImport   = "import"
	TypeCheck    = "check"
	TypeForget   = "forget"
	TypeTrust    = "trust"
	TypeConnect  = "connect"
)

// Error is a failure reply: the server sends one for every request it cannot
// answer, and the Client returns one for every error reply it receives. A
// CGP handler may return one to choose the code the agent sees.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// ErrNoDaemon is wrapped by Dial when nothing serves the socket.
var ErrNoDaemon = errors.New("no cmbnode daemon is running")

// Event is one pushed event as a listener receives it. Cursor is a
// cmb-accepted event's data.cursor: keep the last one read, and
// ListenAfter it on a new connection to receive what came after.
type Event struct {
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	Cursor string          `json:"-"`
}

// encodeResult renders {"type":"result","action":action,"id":id, …payload's members}.
// payload must marshal to a JSON object (or be nil).
func encodeResult(action string, id json.RawMessage, payload any) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(256)
	buf.WriteString(`{"type":"result","action":`)
	buf.Write(appendJSONString(nil, action))
	if len(id) > 0 {
		buf.WriteString(`,"id":`)
		buf.Write(id)
	}
	if payload == nil {
		buf.WriteByte('}')
		return buf.Bytes(), nil
	}
	if r, ok := payload.(node.Result); ok {
		// Every remember and publish replies with one: written directly,
		// without reflection.
		return append(appendResultMembers(buf.Bytes(), r), '}'), nil
	}
	// The payload is encoded after the envelope's head, in the same
	// buffer, and its members moved down over its opening brace: a recall
	// reply is hundreds of KB, and marshalled on its own and then copied
	// into the envelope it was allocated twice.
	at := buf.Len()
	if err := json.NewEncoder(&buf).Encode(payload); err != nil {
		return nil, fmt.Errorf("encode %s reply: %w", action, err)
	}
	b := buf.Bytes()
	p := bytes.TrimSpace(b[at:])
	if len(p) < 2 || p[0] != '{' || p[len(p)-1] != '}' {
		return nil, fmt.Errorf("encode %s reply: payload is not an object", action)
	}
	b = b[:at]
	if inner := bytes.TrimSpace(p[1 : len(p)-1]); len(inner) > 0 {
		b = append(b, ',')
		b = append(b, inner...) // inner lies after b's end: copy moves it down
	}
	return append(b, '}'), nil
}

// appendResultMembers appends r's members as encoding/json writes them
// (declaration order, omitempty honoured), each after a comma.
// TestResultMembersAreJSONs holds the two together.
func appendResultMembers(b []byte, r node.Result) []byte {
	b = append(b, `,"key":`...)
	b = appendJSONString(b, r.Key)
	b = append(b, `,"duplicate":`...)
	b = strconv.AppendBool(b, r.Duplicate)
	if r.SameAuthor != nil {
		b = append(b, `,"sameAuthor":`...)
		b = strconv.AppendBool(b, *r.SameAuthor)
	}
	if r.Asserted {
		b = append(b, `,"asserted":true`...)
	}
	if r.Forgotten {
		b = append(b, `,"forgotten":true`...)
	}
	return b
}

// encodeError renders an error reply. action is omitted when unknown.
func encodeError(action string, id json.RawMessage, e *Error) []byte {
	b := make([]byte, 0, 128+len(e.Message))
	b = append(b, `{"type":"error"`...)
	if action != "" {
		b = append(b, `,"action":`...)
		b = appendJSONString(b, action)
	}
	if len(id) > 0 {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	b = append(b, `,"code":`...)
	b = appendJSONString(b, e.Code)
	msg, _ := json.Marshal(e.Message) // a string always marshals
	b = append(b, `,"message":`...)
	b = append(b, msg...)
	return append(b, '}')
}

// encodeEvent appends {"type":"event","event":name,"data":data} to dst.
// A cmb-accepted event's data is written by appendAcceptedEvent, the same
// bytes json.Marshal gives.
func encodeEvent(dst []byte, name string, data any) ([]byte, error) {
	dst = append(dst, `{"type":"event","event":`...)
	dst = appendJSONString(dst, name)
	dst = append(dst, `,"data":`...)
	if ev, ok := data.(node.AcceptedEvent); ok {
		b, ok := appendAcceptedEvent(dst, &ev)
		if ok {
			return append(b, '}'), nil
		}
		dst = b[:len(dst)] // json.Marshal refuses it too, and says why
	}
	d, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", name, err)
	}
	dst = append(dst, d...)
	return append(dst, '}'), nil
}

// validID accepts the ids a reply can echo verbatim: strings and numbers.
// Anything else (objects, arrays, booleans, null) is refused so an echo can
// never smuggle structure into a reply.
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	switch c := raw[0]; {
	case c == '"':
		// A member of a valid message: a string. Decoded, each byte of its
		// quoted form gives at most three (an invalid byte becomes U+FFFD),
		// so a short one needs no decoding.
		if 3*(len(raw)-2) <= 256 {
			return true
		}
		s, _ := cmb.StringValue(raw)
		return len(s) <= 256
	case c == '-' || (c >= '0' && c <= '9'):
		// A member of a valid message (decodeMessage) that starts so is a
		// JSON number.
		return len(raw) <= 64
	}
	return false
}
