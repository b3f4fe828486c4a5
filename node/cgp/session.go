package cgp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// Handler answers the payload-carrying requests. Transports (Serve, the
// HTTP handler) own everything else: framing, envelope tolerance, version
// negotiation, correlation ids and error envelopes. Two implementations
// exist: *Engine (in-process, over a Backend) and *RelayHandler (forwards to
// the daemon over a Remote). Errors of type *Error reach the host with their
// code; any other error is reported as `internal` without its text.
type Handler interface {
	// Ack returns the handshake_ack; it must be cheap (hosts time out the
	// handshake after 10 s) and must not block on the store or network.
	Ack() HandshakeAck
	Query(ctx context.Context, q *ContextQuery) (*ContextQueryResult, error)
	Verify(ctx context.Context, req *VerifyRequest) (*VerifyResponse, error)
}

// Limits of the line protocol.
const (
	// MaxInputLine bounds one received envelope. Queries are small; the
	// only legitimately large member is an embedding, which we refuse
	// anyway. A longer line gets bad_request and is skipped to its newline.
	MaxInputLine = 1 << 20
	// MaxOutputLine bounds one emitted envelope, below the 16 MiB a host
	// reads per line. The Engine packs results well under it; this is the
	// backstop for any Handler.
	MaxOutputLine = 15 << 20
)

// Session holds the per-connection protocol state of one stdio provider
// (whether the handshake happened) and turns one received line into at
// most one reply envelope. It is safe for concurrent use.
type Session struct {
	h                Handler
	requireHandshake bool
	handshaken       atomic.Bool
	log              *slog.Logger
}

// NewSession returns a Session that refuses query/verify before a
// handshake (our policy; the spec says no payload moves before it).
func NewSession(h Handler, log *slog.Logger) *Session {
	opt.Logger(&log)
	return &Session{h: h, requireHandshake: true, log: log}
}

// statelessSession serves HTTP, where every POST stands alone.
func statelessSession(h Handler, log *slog.Logger) *Session {
	s := NewSession(h, log)
	s.requireHandshake = false
	return s
}

// Outcome is what a line asks the transport to do.
type Outcome int

const (
	// Continue: keep reading.
	Continue Outcome = iota
	// Stop: the host asked to shut down.
	Stop
)

// Job computes a deferred reply (query and verify), so a transport can run
// it concurrently with reading further lines.
type Job func(ctx context.Context) []byte

// Prepare classifies one line (without its newline). It returns either an
// immediate reply (possibly nil: silence), or a Job to run for the reply.
func (s *Session) Prepare(line []byte) (reply []byte, job Job, out Outcome) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		// Blank lines carry nothing; answering them would desynchronise a
		// lock-step host that never sent a request.
		return nil, nil, Continue
	}
	if !utf8.Valid(trimmed) {
		return errorReply("", CodeBadRequest, "line is not valid UTF-8"), nil, Continue
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return errorReply("", CodeBadRequest, "line is not a JSON object envelope"), nil, Continue
	}
	typ, ok := rawString(env["type"])
	if !ok || typ == "" {
		return errorReply("", CodeBadRequest, "envelope has no string `type`"), nil, Continue
	}
	id, isString := rawString(env["id"])
	if raw := env["id"]; len(raw) > 0 && !isString && !isJSONNull(raw) {
		// A reply carries its id as a string; echoing 7 as "7" would not
		// match a host that compares JSON values, so refuse it plainly.
		return errorReply("", CodeBadRequest, "id must be a JSON string, e.g. \"id\":\"7\", not "+truncateRaw(raw)), nil, Continue
	}
	switch typ {
	case TypeHandshake:
		return s.handshake(env), nil, Continue
	case TypeShutdown:
		return nil, nil, Stop
	case TypeQuery, TypeVerify:
		if s.requireHandshake && !s.handshaken.Load() {
			return errorReply(id, CodeBadRequest, "send handshake before "+typ), nil, Continue
		}
		payload := env["query"]
		if typ == TypeVerify {
			payload = env["request"]
		}
		if len(payload) == 0 || isJSONNull(payload) {
			return errorReply(id, CodeBadRequest, typ+" envelope has no payload"), nil, Continue
		}
		if typ == TypeQuery {
			q, err := DecodeQuery(payload)
			if err != nil {
				return s.errorFor(id, err), nil, Continue
			}
			return nil, func(ctx context.Context) []byte { return s.query(ctx, id, q) }, Continue
		}
		req, err := DecodeVerifyRequest(payload)
		if err != nil {
			return s.errorFor(id, err), nil, Continue
		}
		return nil, func(ctx context.Context) []byte { return s.verify(ctx, id, req) }, Continue
	case TypeHandshakeAck, TypeFrames, TypeVerified, TypeError:
		// Only a provider sends these; a host echoing one gets silence.
		return nil, nil, Continue
	}
	if id != "" {
		return errorReply(id, CodeBadRequest, fmt.Sprintf("unsupported envelope type %q", typ)), nil, Continue
	}
	// An unknown notification is ignored: replying would look like the
	// answer to the host's next request.
	return nil, nil, Continue
}

// HandleLine is Prepare with the job run inline: the lock-step path.
func (s *Session) HandleLine(ctx context.Context, line []byte) ([]byte, Outcome) {
	reply, job, out := s.Prepare(line)
	if job != nil {
		reply = job(ctx)
	}
	return reply, out
}

func (s *Session) handshake(env map[string]json.RawMessage) []byte {
	v, _ := rawString(env["protocol_version"])
	if fam, ok := versionFamily(v); !ok || fam != versionFamilyOf(ProtocolVersion) {
		return errorReply("", CodeIncompatibleVersion,
			fmt.Sprintf("host speaks %q; this provider speaks the contextgraph/1 family (%s)", v, ProtocolVersion))
	}
	ack := s.h.Ack()
	ack.Type = TypeHandshakeAck
	if ack.Capabilities.Query.Kinds == nil {
		ack.Capabilities.Query.Kinds = []string{}
	}
	s.handshaken.Store(true)
	return s.encode("", ack)
}

func (s *Session) query(ctx context.Context, id string, q *ContextQuery) []byte {
	res, err := s.h.Query(ctx, q)
	if err != nil {
		return s.errorFor(id, err)
	}
	if res.Frames == nil {
		res.Frames = []Frame{}
	}
	return s.encode(id, framesEnvelope{Type: TypeFrames, ID: id, Result: res})
}

func (s *Session) verify(ctx context.Context, id string, req *VerifyRequest) []byte {
	resp, err := s.h.Verify(ctx, req)
	if err != nil {
		return s.errorFor(id, err)
	}
	if resp.Verdicts == nil {
		resp.Verdicts = []Verdict{}
	}
	return s.encode(id, verifiedEnvelope{Type: TypeVerified, ID: id, Response: resp})
}

func (s *Session) errorFor(id string, err error) []byte {
	var pe *Error
	if errors.As(err, &pe) {
		msg := pe.Message
		if msg == "" {
			msg = pe.Code
		}
		return errorReply(id, pe.Code, msg)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errorReply(id, CodeUnavailable, "request timed out or was cancelled")
	}
	s.log.Error("cgp handler failed", "err", err)
	return errorReply(id, CodeInternal, "internal provider error")
}

func (s *Session) encode(id string, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("cgp encode failed", "err", err)
		return errorReply(id, CodeInternal, "could not encode reply")
	}
	if len(b) > MaxOutputLine {
		s.log.Error("cgp reply too large", "bytes", len(b))
		return errorReply(id, CodeInternal, "reply exceeds the line limit; lower max_tokens")
	}
	return b
}

func errorReply(id, code, msg string) []byte {
	b, _ := json.Marshal(errorEnvelope{Type: TypeError, ID: id, Code: code, Message: msg})
	return b
}

// versionFamily checks contextgraph/<major>.<minor>[-draft] and returns the
// family (everything before the first '.').
func versionFamily(v string) (string, bool) {
	rest, ok := strings.CutPrefix(v, "contextgraph/")
	if !ok {
		return "", false
	}
	rest = strings.TrimSuffix(rest, "-draft")
	major, minor, ok := strings.Cut(rest, ".")
	if !ok || !allDigits(major) || !allDigits(minor) {
		return "", false
	}
	return "contextgraph/" + major, true
}

func versionFamilyOf(v string) string {
	f, _ := versionFamily(v)
	return f
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// truncateRaw quotes at most 32 bytes of a received JSON value in an error.
func truncateRaw(raw json.RawMessage) string {
	if len(raw) > 32 {
		return string(raw[:32]) + "…"
	}
	return string(raw)
}
