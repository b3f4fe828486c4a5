package cgp

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"
)

// HTTP binding limits. Mount the handler on a server built by
// NewHTTPServer (or one with equivalent timeouts): ReadHeaderTimeout 5 s,
// ReadTimeout 10 s, WriteTimeout 35 s (a query may take up to the 25 s
// request timeout, hosts give up at 30 s), IdleTimeout 60 s.
const (
	// MaxHTTPBody bounds one request envelope, as MaxInputLine does on stdio.
	MaxHTTPBody = MaxInputLine
)

// HTTPOptions tunes NewHTTPHandler.
type HTTPOptions struct {
	Logger *slog.Logger
	// BearerToken, if set, is required as `Authorization: Bearer <token>`;
	// anything else gets 401.
	BearerToken string
	// RequestTimeout bounds one query or verify (default 25 s).
	RequestTimeout time.Duration
}

// NewHTTPHandler serves the whole protocol from one POST handler mounted at
// any path: one envelope per request body, one per response body. Every
// POST stands alone (no handshake state). Replies are 200 with an envelope,
// including protocol `error`s; 204 with no body for `shutdown` and for
// envelopes that get no reply (notifications); 400 with a bad_request
// envelope only when the body is not an envelope at all (not UTF-8 JSON with
// a `type`, or larger than MaxHTTPBody); 405 for non-POST; 401 without the
// configured bearer token.
func NewHTTPHandler(h Handler, opts HTTPOptions) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 25 * time.Second
	}
	return &httpHandler{h: h, opts: opts}
}

type httpHandler struct {
	h    Handler
	opts HTTPOptions
}

func (hh *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST one contextgraph envelope", http.StatusMethodNotAllowed)
		return
	}
	if tok := hh.opts.BearerToken; tok != "" {
		want := "Bearer " + tok
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeEnvelope(w, http.StatusUnauthorized, errorReply("", "unauthorized", "missing or wrong bearer token"))
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxHTTPBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeEnvelope(w, http.StatusBadRequest, errorReply("", CodeBadRequest, "body exceeds the envelope size limit"))
			return
		}
		writeEnvelope(w, http.StatusBadRequest, errorReply("", CodeBadRequest, "could not read body"))
		return
	}
	if isUnparseable(body) {
		writeEnvelope(w, http.StatusBadRequest, errorReply("", CodeBadRequest, "body is not a JSON envelope with a `type`"))
		return
	}
	sess := statelessSession(hh.h, hh.opts.Logger)
	reply, job, outcome := sess.Prepare(body)
	if outcome == Stop {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if job != nil {
		ctx, cancel := context.WithTimeout(r.Context(), hh.opts.RequestTimeout)
		defer cancel()
		reply = job(ctx)
	}
	if reply == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeEnvelope(w, http.StatusOK, reply)
}

// isUnparseable reports a body that is not an envelope at all; only those
// get 400, because hosts turn non-2xx into a transport error and lose the
// error code.
func isUnparseable(body []byte) bool {
	var probe struct {
		Type *string `json:"type"`
	}
	return !utf8.Valid(body) || json.Unmarshal(body, &probe) != nil || probe.Type == nil
}

func writeEnvelope(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// NewHTTPServer returns a server for the HTTP binding with the documented
// timeouts. The daemon binds it to loopback by default; a non-loopback
// address needs TLS (C7), and hosts treat every HTTP provider as egress.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      35 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}
