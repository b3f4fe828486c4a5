package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cmbnode/cmbnode/node"
)

// Client is a connection to the daemon's socket. It is safe for concurrent
// use: every call carries its own id, so calls may overlap.
type Client struct {
	nc   net.Conn
	path string

	wmu  sync.Mutex
	next atomic.Uint64

	mu      sync.Mutex
	pending map[string]chan reply
	err     error // why the connection ended

	events        chan Event
	eventsDropped atomic.Int64
	done          chan struct{}
}

type reply struct {
	raw json.RawMessage
	err error
}

// Dial connects to the daemon socket at path. When nothing serves it the
// error wraps ErrNoDaemon.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		// No file, or a file nobody accepts on (left by a crash): no daemon.
		// Anything else, say a permission problem, is reported as itself.
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s", ErrNoDaemon, path)
		}
		return nil, fmt.Errorf("connect to daemon at %s: %w", path, err)
	}
	c := &Client{
		nc: nc, path: path, pending: map[string]chan reply{},
		events: make(chan Event, 1024), done: make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

// Close closes the connection; calls in progress fail.
func (c *Client) Close() error { return c.nc.Close() }

// Path is the socket this client is connected to.
func (c *Client) Path() string { return c.path }

// Done is closed when the connection has ended; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it is open).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Events delivers pushed events after Listen. The channel is closed when
// the connection ends. Events that find it full are dropped and counted
// (EventsDropped), so an unread channel never stalls replies.
func (c *Client) Events() <-chan Event { return c.events }

// EventsDropped counts events dropped because Events was not read.
func (c *Client) EventsDropped() int64 { return c.eventsDropped.Load() }

// Call sends one request of type typ whose other members are args (a
// struct or map that marshals to a JSON object, or nil) and returns the
// whole result object. An error reply is returned as an *Error.
func (c *Client) Call(ctx context.Context, typ string, args any) (json.RawMessage, error) {
	raw, err := c.roundTrip(ctx, typ, args)
	if err == nil && !json.Valid(raw) {
		return nil, fmt.Errorf("daemon at %s sent a malformed %s reply", c.path, typ)
	}
	return raw, err
}

// roundTrip is Call without checking that a result is JSON (the reader
// took its id from the head alone): the caller decodes it, or checks it.
func (c *Client) roundTrip(ctx context.Context, typ string, args any) (json.RawMessage, error) {
	id := strconv.FormatUint(c.next.Add(1), 10)
	msg, err := encodeRequest(typ, id, args)
	if err != nil {
		return nil, err
	}
	if len(msg) > MaxMessage {
		return nil, Errorf(CodeTooLarge, "request is %d bytes, over the %d-byte limit", len(msg), MaxMessage)
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if err := c.write(ctx, append(msg, '\n')); err != nil {
		forget()
		return nil, err
	}
	select {
	case r := <-ch:
		return r.raw, r.err
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("%s request to %s: %w", typ, c.path, ctx.Err())
	}
}

func (c *Client) write(ctx context.Context, b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
		defer c.nc.SetWriteDeadline(time.Time{})
	}
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("send to daemon at %s: %w", c.path, err)
	}
	return nil
}

// encodeRequest splices type and id into args' object.
func encodeRequest(typ, id string, args any) ([]byte, error) {
	b := []byte(`{"type":`)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"id":`...)
	b = strconv.AppendQuote(b, id)
	if args != nil {
		p, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("encode %s request: %w", typ, err)
		}
		if len(p) < 2 || p[0] != '{' {
			return nil, fmt.Errorf("encode %s request: arguments are not an object", typ)
		}
		if inner := bytes.TrimSpace(p[1 : len(p)-1]); len(inner) > 0 {
			b = append(b, ',')
			b = append(b, inner...)
		}
	}
	return append(b, '}'), nil
}

// deliver hands a reply to the call waiting for id, if it still waits.
func (c *Client) deliver(id string, r reply) {
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil { // else the caller gave up
		ch <- r
	}
}

// resultID reads the id of a result reply from its head, where the
// server writes it ({"type":"result","action":"…","id":"…",…}, see
// encodeResult), without a pass over the payload: a recall reply is ~10 kB
// that the caller decodes (and so validates) anyway. Any other shape is
// false, for the full decode.
func resultID(b []byte) (string, bool) {
	const head, idm = `{"type":"result","action":"`, `,"id":"`
	rest, ok := bytes.CutPrefix(b, []byte(head))
	if !ok {
		return "", false
	}
	i := bytes.IndexAny(rest, `"\`)
	if i < 0 || rest[i] != '"' {
		return "", false
	}
	if rest, ok = bytes.CutPrefix(rest[i+1:], []byte(idm)); !ok {
		return "", false
	}
	i = bytes.IndexAny(rest, `"\`)
	if i < 0 || rest[i] != '"' {
		return "", false
	}
	return string(rest[:i]), true
}

func (c *Client) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	var err error
	for {
		buf, err = readLine(br, buf[:0])
		if err != nil {
			break
		}
		if id, ok := resultID(buf); ok {
			c.deliver(id, reply{raw: append(json.RawMessage(nil), buf...)})
			continue
		}
		var head struct {
			Type    string          `json:"type"`
			ID      json.RawMessage `json:"id"`
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Event   string          `json:"event"`
			Data    json.RawMessage `json:"data"`
		}
		if json.Unmarshal(buf, &head) != nil {
			err = fmt.Errorf("daemon at %s sent a malformed message", c.path)
			break
		}
		if head.Type == "event" {
			ev := Event{Event: head.Event, Data: head.Data}
			if ev.Event == "cmb-accepted" {
				var d struct {
					Cursor string `json:"cursor"`
				}
				json.Unmarshal(ev.Data, &d) // a data without a cursor leaves it empty
				ev.Cursor = d.Cursor
			}
			select {
			case c.events <- ev:
			default:
				c.eventsDropped.Add(1)
			}
			continue
		}
		var id string
		if json.Unmarshal(head.ID, &id) != nil {
			// An error without an id answers no call of ours (e.g. the
			// server refusing a connection over its limit): it ends them all.
			if head.Type == "error" {
				err = &Error{Code: head.Code, Message: head.Message}
				break
			}
			continue
		}
		r := reply{raw: append(json.RawMessage(nil), buf...)}
		if head.Type == "error" {
			r = reply{err: &Error{Code: head.Code, Message: head.Message}}
		}
		c.deliver(id, r)
	}
	var e *Error
	if !errors.As(err, &e) {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("daemon at %s closed the connection", c.path)
		} else if !errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("read from daemon at %s: %w", c.path, err)
		} else {
			err = fmt.Errorf("connection to daemon at %s is closed", c.path)
		}
	}
	c.mu.Lock()
	c.err = err
	for id, ch := range c.pending {
		ch <- reply{err: err}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.events)
	close(c.done)
	c.nc.Close()
}

// readLine reads one NDJSON line within the message cap.
func readLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		part, err := br.ReadSlice('\n')
		if len(buf)+len(part) > MaxMessage+2 {
			return nil, fmt.Errorf("message over %d bytes", MaxMessage)
		}
		buf = append(buf, part...)
		if err == nil {
			if t := bytes.TrimSpace(buf); len(t) > 0 {
				return t, nil
			}
			buf = buf[:0]
			continue
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// Typed calls. Each returns an *Error for an error reply.

// RememberArgs is a remember request.
type RememberArgs struct {
	Fields  map[string]any `json:"fields"`
	Parents []string       `json:"parents,omitempty"`
	To      string         `json:"to,omitempty"`
}

// Remember asks the daemon to author a record; it returns once the record is durable.
func (c *Client) Remember(ctx context.Context, a RememberArgs) (node.Result, error) {
	var r node.Result
	return r, c.call(ctx, TypeRemember, a, &r)
}

// Publish hands the daemon a record signed by the agent's own key.
func (c *Client) Publish(ctx context.Context, rec json.RawMessage, publicKey string) (node.Result, error) {
	var r node.Result
	return r, c.call(ctx, TypePublish, map[string]any{"cmb": rec, "publicKey": publicKey}, &r)
}

// Recall ranks stored records against query.
func (c *Client) Recall(ctx context.Context, query string, limit int) ([]node.RecallHit, error) {
	return c.RecallWith(ctx, query, node.RecallOptions{Limit: limit})
}

// RecallWith is Recall with a score threshold (min_score, left out at 0).
func (c *Client) RecallWith(ctx context.Context, query string, o node.RecallOptions) ([]node.RecallHit, error) {
	r, err := c.RecallReply(ctx, query, o)
	return r.Results, err
}

// RecallReply is a recall result: the hits, best first, and the catch-up
// in progress when the node is still receiving its peers' records (so a
// caller can say the answer may be incomplete without asking for status).
type RecallReply struct {
	Results []node.RecallHit   `json:"results"`
	Sync    *node.SyncProgress `json:"sync,omitempty"`
}

// RecallReply is RecallWith with the whole reply.
func (c *Client) RecallReply(ctx context.Context, query string, o node.RecallOptions) (RecallReply, error) {
	var r RecallReply
	err := c.call(ctx, TypeRecall, recallArgs(query, o), &r)
	return r, err
}

// RecallRaw is RecallReply undecoded: the daemon's reply message as it
// came, not even checked to be JSON, for a caller that decodes it into a
// type of its own with RecallReply's members (and so checks it) and would
// otherwise pay for decoding every hit twice.
func (c *Client) RecallRaw(ctx context.Context, query string, o node.RecallOptions) (json.RawMessage, error) {
	return c.roundTrip(ctx, TypeRecall, recallArgs(query, o))
}

func recallArgs(query string, o node.RecallOptions) map[string]any {
	req := map[string]any{"query": query, "limit": o.Limit}
	if o.MinScore != 0 {
		req["min_score"] = o.MinScore
	}
	return req
}

// GetReply is a get result: the record as received and how it was stored.
type GetReply struct {
	CMB      json.RawMessage `json:"cmb"`
	Source   string          `json:"source"`
	StoredAt int64           `json:"storedAt"`
	Directed bool            `json:"directed"`
	// KeyConfirmed is false when the author's key is known only from the
	// gossiped frames that carried its records (lower provenance).
	KeyConfirmed bool `json:"keyConfirmed"`
	// Assertions are other authors' signed records of the same content
	// (a cmb1- root key covers the fields, not the author), oldest first.
	Assertions []AssertionReply `json:"assertions"`
}

// AssertionReply is one other author's record of a held record's content.
type AssertionReply struct {
	CreatedBy string          `json:"createdBy"`
	CreatedAt int64           `json:"createdAt"`
	CMB       json.RawMessage `json:"cmb"`
}

// Forget forgets a record on the daemon's node (local only); key may be a
// unique prefix.
func (c *Client) Forget(ctx context.Context, key string) (node.ForgetResult, error) {
	var r node.ForgetResult
	return r, c.call(ctx, TypeForget, map[string]any{"key": key}, &r)
}

// Get fetches one record.
func (c *Client) Get(ctx context.Context, key string) (GetReply, error) {
	var r GetReply
	return r, c.call(ctx, TypeGet, map[string]any{"key": key}, &r)
}

// Lineage lists a record's ancestors and descendants (depth 0: all).
func (c *Client) Lineage(ctx context.Context, key string, depth int) (node.LineageResult, error) {
	var r node.LineageResult
	return r, c.call(ctx, TypeLineage, map[string]any{"key": key, "depth": depth}, &r)
}

// StatusReply is a status result.
type StatusReply struct {
	node.Status
	Conflicts            []node.Conflict `json:"conflicts"`
	SocketClients        int64           `json:"socketClients"`
	SocketClientsDropped int64           `json:"socketClientsDropped"`
}

// StatusAt asks the daemon at the socket path for its status on a
// connection of its own, closed after.
func StatusAt(ctx context.Context, path string) (StatusReply, error) {
	c, err := Dial(ctx, path)
	if err != nil {
		return StatusReply{}, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// Status describes the running node.
func (c *Client) Status(ctx context.Context) (StatusReply, error) {
	var r StatusReply
	return r, c.call(ctx, TypeStatus, nil, &r)
}

// Peers lists handshaken peers.
func (c *Client) Peers(ctx context.Context) ([]node.PeerInfo, error) {
	var r struct {
		Peers []node.PeerInfo `json:"peers"`
	}
	err := c.call(ctx, TypePeers, nil, &r)
	return r.Peers, err
}

// Connect asks the daemon to dial a peer (a multiaddr ending in
// /p2p/<peerId>) and returns it once admitted. A bad address fails with
// code bad_request, a failed dial with unavailable, a failed handshake or
// membership proof with rejected.
func (c *Client) Connect(ctx context.Context, addr string) (node.PeerInfo, error) {
	var r struct {
		Peer node.PeerInfo `json:"peer"`
	}
	err := c.call(ctx, TypeConnect, map[string]any{"addr": addr}, &r)
	return r.Peer, err
}

// Query relays a CGP ContextQuery and returns the ContextQueryResult
// (this and Verify make a Client usable as the CGP provider's remote).
func (c *Client) Query(ctx context.Context, query json.RawMessage) (json.RawMessage, error) {
	var r struct {
		Result json.RawMessage `json:"result"`
	}
	err := c.call(ctx, TypeQuery, map[string]json.RawMessage{"query": query}, &r)
	return r.Result, err
}

// Verify relays a CGP VerifyRequest and returns the VerifyResponse.
func (c *Client) Verify(ctx context.Context, request json.RawMessage) (json.RawMessage, error) {
	var r struct {
		Response json.RawMessage `json:"response"`
	}
	err := c.call(ctx, TypeVerify, map[string]json.RawMessage{"request": request}, &r)
	return r.Response, err
}

// Listen subscribes this connection to events; read them from Events.
func (c *Client) Listen(ctx context.Context) error {
	return c.call(ctx, TypeListen, nil, nil)
}

// ListenAfter subscribes this connection to events, first delivering as
// cmb-accepted events every record the node accepted after cursor (an
// Event's Cursor, or one ListenAfter or Listen returned), then live
// events, none twice. "" subscribes without a replay. It returns the
// cursor live events start after. A cursor the node no longer numbers
// (a restart, or more records since than it keeps) is an *Error with
// code CodeCursorExpired: catch up with Export or Recent, then listen
// afresh. If EventsDropped grows, events were lost here, in the client:
// resume on a new connection after the last cursor read.
func (c *Client) ListenAfter(ctx context.Context, cursor string) (string, error) {
	var args any
	if cursor != "" {
		args = map[string]string{"after": cursor}
	}
	var r struct {
		Cursor string `json:"cursor"`
	}
	err := c.call(ctx, TypeListen, args, &r)
	return r.Cursor, err
}

func (c *Client) call(ctx context.Context, typ string, args, out any) error {
	raw, err := c.roundTrip(ctx, typ, args)
	if err != nil {
		return err
	}
	if out == nil {
		if !json.Valid(raw) {
			return fmt.Errorf("daemon at %s sent a malformed %s reply", c.path, typ)
		}
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("daemon at %s sent an unreadable %s reply: %w", c.path, typ, err)
	}
	return nil
}
