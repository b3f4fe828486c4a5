package cgp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// HTTP binding limits. Mount the handler on a server built by
// NewHTTPServer (or one with equivalent timeouts): ReadHeaderTimeout 5 s,
// ReadTimeout 10 s, WriteTimeout 35 s (a query may take up to the 25 s
// request timeout, hosts give up at 30 s), IdleTimeout 60 s.
const (
	// MaxHTTPBody bounds one request envelope, as MaxInputLine does on stdio.
	MaxHTTPBody = MaxInputLine
)

// Error codes of the HTTP binding's refusals. The CGP code vocabulary is
// open (an unknown code reads as `internal`), and these never reach a
// session: they answer requests refused before the envelope is read.
const (
	// CodeUnauthorized: the bearer token is missing or wrong (401).
	CodeUnauthorized = "unauthorized"
	// CodeForbidden: a foreign Host (421) or a cross-origin browser
	// request (403).
	CodeForbidden = "forbidden"
)

// MinBearerToken is the shortest bearer token CheckBearerToken accepts: 32
// characters of token68 carry enough entropy that guessing over loopback is
// hopeless when the token is random.
const MinBearerToken = 32

// ErrBadToken: a bearer token too short, or with characters a client cannot
// send in an Authorization header.
var ErrBadToken = errors.New("unusable bearer token")

// CheckBearerToken checks that tok can be the binding's bearer token: at
// least MinBearerToken characters of the RFC 9110 token68 alphabet
// (letters, digits, -._~+/, then optional trailing =). The error never
// quotes the token.
func CheckBearerToken(tok string) error {
	if len(tok) < MinBearerToken {
		return fmt.Errorf("%w: it has %d characters, at least %d are needed", ErrBadToken, len(tok), MinBearerToken)
	}
	body := strings.TrimRight(tok, "=")
	if body == "" {
		return fmt.Errorf("%w: it is only padding", ErrBadToken)
	}
	for _, c := range body {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("-._~+/", c)) {
			return fmt.Errorf("%w: use only letters, digits and -._~+/ (then optional trailing =)", ErrBadToken)
		}
	}
	return nil
}

// HTTPOptions tunes NewHTTPHandler; each field left zero takes its value in
// DefaultHTTPOptions.
type HTTPOptions struct {
	Logger *slog.Logger
	// BearerToken is required as `Authorization: Bearer <token>`; anything
	// else gets 401. Empty authenticates no request at all, so a caller that
	// forgets to set it serves nothing rather than every memory to anyone.
	BearerToken string
	// RequestTimeout bounds one query or verify (default 25 s).
	RequestTimeout time.Duration
}

// DefaultHTTPOptions returns the settings NewHTTPHandler uses for the
// fields left zero. BearerToken has no default.
func DefaultHTTPOptions() HTTPOptions { return HTTPOptions{RequestTimeout: requestTimeout} }

// NewHTTPHandler serves the whole protocol from one POST handler mounted at
// any path: one envelope per request body, one per response body. Every
// POST stands alone (no handshake state). Replies are 200 with an envelope,
// including protocol `error`s; 204 with no body for `shutdown` and for
// envelopes that get no reply (notifications); 400 with a bad_request
// envelope only when the body is not an envelope at all (not UTF-8 JSON with
// a `type`, or larger than MaxHTTPBody); 405 for non-POST; 401 without the
// configured bearer token.
//
// Before any of that, two refusals keep web pages out, because a browser
// lets any page send requests to loopback: 421 when the Host header is not a
// loopback name or address (a DNS-rebound page sends its own name), and 403
// for a cross-origin browser request (an Origin other than this server's
// own, or Sec-Fetch-Site cross-site or same-site). No CORS header is ever
// granted, so preflights fail too. Refusals carry a `forbidden` or
// `unauthorized` error envelope and are never logged with their headers.
func NewHTTPHandler(h Handler, opts HTTPOptions) http.Handler {
	opt.Logger(&opts.Logger)
	opt.Default(&opts.RequestTimeout, DefaultHTTPOptions().RequestTimeout)
	hh := &httpHandler{h: h, opts: opts}
	if opts.BearerToken != "" {
		hh.tokenSum = sha256.Sum256([]byte(opts.BearerToken))
		hh.hasToken = true
	}
	return hh
}

type httpHandler struct {
	h    Handler
	opts HTTPOptions
	// tokenSum is the SHA-256 of the bearer token: comparing digests takes
	// the same time whatever the presented token's length or content.
	tokenSum [sha256.Size]byte
	hasToken bool
}

func (hh *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !loopbackHost(r.Host) {
		hh.refuse(w, r, http.StatusMisdirectedRequest, "foreign host",
			"the Host header is not a loopback name or address; this binding answers only localhost, *.localhost, 127.0.0.0/8 and [::1]")
		return
	}
	if crossOrigin(r) {
		hh.refuse(w, r, http.StatusForbidden, "cross-origin",
			"cross-origin browser requests are refused; use a local client, not a web page")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST one contextgraph envelope", http.StatusMethodNotAllowed)
		return
	}
	if !hh.authorized(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		hh.opts.Logger.Debug("CGP HTTP request refused", "reason", "no valid bearer token", "remote", r.RemoteAddr)
		writeEnvelope(w, http.StatusUnauthorized, errorReply("", CodeUnauthorized, "missing or wrong bearer token; send the header Authorization: Bearer TOKEN"))
		return
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

// refuse answers a request refused before authentication. The log names the
// reason and the peer only: headers may carry the token.
func (hh *httpHandler) refuse(w http.ResponseWriter, r *http.Request, status int, reason, msg string) {
	hh.opts.Logger.Debug("CGP HTTP request refused", "reason", reason, "remote", r.RemoteAddr)
	writeEnvelope(w, status, errorReply("", CodeForbidden, msg))
}

// authorized reports whether header is `Bearer <the token>` (the scheme is
// case-insensitive, RFC 9110 §11.1). Without a configured token nothing is.
func (hh *httpHandler) authorized(header string) bool {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !hh.hasToken {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimLeft(cred, " ")))
	return subtle.ConstantTimeCompare(got[:], hh.tokenSum[:]) == 1
}

// loopbackHost reports whether a Host header names this machine and nothing
// else: localhost or a *.localhost name (RFC 6761: they never leave the
// machine, so no one can re-point them), an address in 127.0.0.0/8, or
// [::1]; each with or without a port. Any other name may be an attacker's
// domain re-pointed at 127.0.0.1 (DNS rebinding), so it is refused even
// though the connection came in on loopback.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if strings.Contains(host, ":") {
		return false // a bare IPv6 address or a malformed port
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return (ip.Is4() && ip.IsLoopback()) || ip == netip.IPv6Loopback()
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	return name == "localhost" || (strings.HasSuffix(name, ".localhost") && len(name) > len(".localhost"))
}

// crossOrigin reports a request a browser sent on behalf of another site's
// page. Browsers add Origin to every cross-origin POST and Sec-Fetch-Site
// to every request; hosts and curl send neither. Only this server's own
// origin passes, and it serves no pages.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	origin, ok := r.Header["Origin"]
	if !ok {
		return false
	}
	return len(origin) != 1 || !strings.EqualFold(origin[0], "http://"+r.Host)
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
