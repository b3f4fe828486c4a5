package cgp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Remote is how `cmbnode cgp` reaches the daemon: the socket contract's
// `query` and `verify` requests, carrying the CGP payloads verbatim. The
// integrator implements it over $CMBNODE_HOME/daemon.sock. An error that
// wraps *Error (e.g. the daemon's own bad_request) reaches the host with its
// code; any other error means the daemon could not be reached or answered
// nothing usable, and becomes `unavailable` naming the socket.
type Remote interface {
	Query(ctx context.Context, query json.RawMessage) (result json.RawMessage, err error)
	Verify(ctx context.Context, request json.RawMessage) (response json.RawMessage, err error)
}

// RelayHandler is the Handler of the stdio shim: it answers the handshake
// locally (so a host gets an ack even with no daemon running) and relays
// query/verify to the daemon, which validates and answers them with its
// Engine. It opens nothing but the Remote, so egress:false stays true.
type RelayHandler struct {
	// AckInfo is what the daemon's Engine would acknowledge; the shim
	// builds it with NewEngine over no store or from the same config, so
	// provider name and attester key match what the daemon signs with.
	AckInfo HandshakeAck
	Remote  Remote
	// Socket names the daemon socket in `unavailable` messages.
	Socket string
}

// Ack implements Handler.
func (rh *RelayHandler) Ack() HandshakeAck { return rh.AckInfo }

// Query implements Handler.
func (rh *RelayHandler) Query(ctx context.Context, q *ContextQuery) (*ContextQueryResult, error) {
	raw, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("cgp relay: encode query: %w", err)
	}
	out, err := rh.Remote.Query(ctx, raw)
	if err != nil {
		return nil, rh.remoteErr(err)
	}
	var res ContextQueryResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, Errorf(CodeUnavailable, "daemon at %s sent an unreadable query result", rh.Socket)
	}
	return &res, nil
}

// Verify implements Handler.
func (rh *RelayHandler) Verify(ctx context.Context, req *VerifyRequest) (*VerifyResponse, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("cgp relay: encode verify: %w", err)
	}
	out, err := rh.Remote.Verify(ctx, raw)
	if err != nil {
		return nil, rh.remoteErr(err)
	}
	var resp VerifyResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, Errorf(CodeUnavailable, "daemon at %s sent an unreadable verify response", rh.Socket)
	}
	return &resp, nil
}

func (rh *RelayHandler) remoteErr(err error) error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Errorf(CodeUnavailable, "daemon at %s did not answer in time", rh.Socket)
	}
	msg := err.Error()
	if !strings.Contains(msg, rh.Socket) {
		msg = "cannot reach the cmbnode daemon at " + rh.Socket + ": " + msg
	}
	return Errorf(CodeUnavailable, "%s; start `cmbnode daemon` with that home, or give `cmbnode cgp` the daemon's --home", msg)
}
