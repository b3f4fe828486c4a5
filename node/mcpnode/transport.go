package mcpnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport is MCP's stdio transport (newline-delimited JSON-RPC) with
// the error handling the protocol prescribes where the SDK's own ends the
// session: a line that is not JSON, not UTF-8, over MaxRequest, or not a
// JSON-RPC message is answered with a JSON-RPC error (parse error or
// invalid request) and the server reads on. Stdout carries only what the
// SDK and these replies write, one message a line.
//
// Batches (JSON arrays), which only protocol 2025-03-26 allowed and no host
// sends, are answered with an invalid-request error.
type stdioTransport struct {
	in  io.Reader
	out io.Writer
	log *slog.Logger
}

func (t *stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &stdioConn{out: t.out, log: t.log, incoming: make(chan jsonrpc.Message), closed: make(chan struct{})}
	go c.readLoop(t.in)
	return c, nil
}

type stdioConn struct {
	out io.Writer
	log *slog.Logger

	wmu sync.Mutex

	incoming  chan jsonrpc.Message
	readErr   error // set before incoming is closed
	closeOnce sync.Once
	closed    chan struct{}
}

// readLoop reads one line at a time. The host owns the pipe, so there is no
// deadline between or within messages (a half-written line only stalls the
// host's own session); the size cap bounds what one line can hold here.
func (c *stdioConn) readLoop(in io.Reader) {
	defer close(c.incoming)
	br := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	for {
		var err error
		var over bool
		line, over, err = readLine(br, line[:0], MaxRequest)
		if over {
			c.refuse(peekID(line), jsonrpc.CodeInvalidRequest, fmt.Sprintf("message over %d bytes: the limit of one request (see docs/mcp.md)", MaxRequest))
		} else if msg := bytes.TrimSpace(line); len(msg) > 0 {
			if m := c.decode(msg); m != nil {
				select {
				case c.incoming <- m:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.readErr = fmt.Errorf("read stdin: %w", err)
			}
			return
		}
	}
}

// readLine appends one line (without its newline) to buf. A line longer
// than limit is read to its end but not kept: over is true and buf holds
// only its first bytes, for peekID.
func readLine(br *bufio.Reader, buf []byte, limit int) (_ []byte, over bool, _ error) {
	for {
		part, err := br.ReadSlice('\n')
		if !over {
			if len(buf)+len(part) > limit+1 {
				over = true
				buf = append(buf, part[:min(len(part), 4096)]...)
			} else {
				buf = append(buf, part...)
			}
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimSuffix(buf, []byte("\n")), over, err
		}
	}
}

// decode turns one line into a message, or answers it with the JSON-RPC
// error the line earns and returns nil.
func (c *stdioConn) decode(line []byte) jsonrpc.Message {
	switch {
	case !utf8.Valid(line):
		// JSON text is UTF-8 (RFC 8259 §8.1): not UTF-8 is not JSON.
		c.refuse(peekID(line), jsonrpc.CodeParseError, "parse error: the message is not valid UTF-8")
		return nil
	case !json.Valid(line):
		c.refuse(jsonrpc.ID{}, jsonrpc.CodeParseError, "parse error: the message is not valid JSON")
		return nil
	case line[0] == '[':
		c.refuse(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request: JSON-RPC batches are not supported; send one message per line")
		return nil
	case line[0] != '{':
		c.refuse(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "invalid request: a message is a JSON object")
		return nil
	}
	m, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		c.refuse(peekID(line), jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
		return nil
	}
	return m
}

// peekID reads a top-level "id" from the start of a message, if it can be
// found there, so an error can name the request it answers; otherwise the
// id is null, as JSON-RPC prescribes when the id cannot be detected.
func peekID(b []byte) jsonrpc.ID {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return jsonrpc.ID{}
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return jsonrpc.ID{}
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return jsonrpc.ID{}
		}
		if t == "id" {
			id, err := jsonrpc.MakeID(v)
			if err != nil {
				return jsonrpc.ID{}
			}
			return id
		}
	}
	return jsonrpc.ID{}
}

// refuse writes a JSON-RPC error response for a message that never reaches
// the SDK.
func (c *stdioConn) refuse(id jsonrpc.ID, code int64, msg string) {
	c.log.Warn("refused a malformed message from the host", "code", code, "err", msg)
	resp := &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}}
	if err := c.Write(context.Background(), resp); err != nil {
		c.log.Warn("could not answer a malformed message", "err", err)
	}
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case m, ok := <-c.incoming:
		if !ok {
			if c.readErr != nil {
				return nil, c.readErr
			}
			return nil, io.EOF
		}
		return m, nil
	}
}

func (c *stdioConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := encode(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.out.Write(append(b, '\n'))
	return err
}

// encode is jsonrpc.EncodeMessage, except that a response to a message
// whose id could not be read carries "id":null, as JSON-RPC requires of
// an error response (the SDK's encoder leaves the member out).
func encode(m jsonrpc.Message) ([]byte, error) {
	if b, ok := encodeResult(m); ok {
		return b, nil
	}
	b, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return nil, fmt.Errorf("encode JSON-RPC message: %w", err)
	}
	if r, ok := m.(*jsonrpc.Response); ok && !r.ID.IsValid() && !bytes.Contains(b, []byte(`"id":`)) {
		b = append([]byte(`{"jsonrpc":"2.0","id":null,`), bytes.TrimPrefix(b, []byte(`{"jsonrpc":"2.0",`))...)
	}
	return b, nil
}

// encodeResult writes a successful response with a number or string id
// byte for byte as jsonrpc.EncodeMessage does, without its second pass over
// the result: the SDK has just marshalled that result (compact, and not
// HTML-escaped), and EncodeMessage's json.Marshal validates and compacts
// a json.RawMessage again, ~55 us for a recall's 16 kB. A result with a line
// break in it (never the SDK's) is left to EncodeMessage.
func encodeResult(m jsonrpc.Message) ([]byte, bool) {
	r, ok := m.(*jsonrpc.Response)
	if !ok || r.Error != nil || len(r.Result) == 0 ||
		bytes.IndexByte(r.Result, '\n') >= 0 || bytes.IndexByte(r.Result, '\r') >= 0 {
		return nil, false
	}
	b := make([]byte, 0, len(r.Result)+64) // room for the id, and the newline Write adds
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	switch id := r.ID.Raw().(type) {
	case int64:
		b = strconv.AppendInt(b, id, 10)
	case string:
		var q bytes.Buffer
		enc := json.NewEncoder(&q)
		enc.SetEscapeHTML(false) // as the SDK's encoder
		if enc.Encode(id) != nil {
			return nil, false
		}
		b = append(b, bytes.TrimSuffix(q.Bytes(), []byte("\n"))...)
	default:
		return nil, false
	}
	b = append(b, `,"result":`...)
	b = append(b, r.Result...)
	return append(b, '}'), true
}

func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

func (c *stdioConn) SessionID() string { return "" }
