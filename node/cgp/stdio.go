package cgp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cmbnode/cmbnode/internal/opt"
)

// requestTimeout is both bindings' default RequestTimeout.
const requestTimeout = 25 * time.Second

// ServeOptions tunes Serve; the zero value is ready to use, each field left
// zero taking its value in DefaultServeOptions.
type ServeOptions struct {
	// Logger receives diagnostics; it must not write to the protocol
	// stream (use stderr). Default: discard.
	Logger *slog.Logger
	// RequestTimeout bounds one query or verify. Default 25 s, below the
	// host's 30 s so the host gets a named `unavailable` instead of a
	// timeout.
	RequestTimeout time.Duration
	// Concurrency bounds queries/verifies in flight (replies may then come
	// out of order, which correlation allows). Default 4.
	Concurrency int
	// ShutdownGrace is how long `shutdown` waits for replies in flight
	// before returning. Default 500 ms, well inside the host's 2 s.
	ShutdownGrace time.Duration
}

// DefaultServeOptions returns the settings Serve uses for the fields left
// zero.
func DefaultServeOptions() ServeOptions {
	return ServeOptions{RequestTimeout: requestTimeout, Concurrency: 4, ShutdownGrace: 500 * time.Millisecond}
}

// Serve runs the stdio binding: one envelope per line each way, replies
// written whole (one Write of envelope+"\n" per reply, under a mutex). It
// returns nil on `shutdown` (after at most ShutdownGrace for requests in
// flight) and on EOF (after finishing requests in flight), and an error only
// when reading or writing fails or ctx ends. Lines longer than MaxInputLine
// get bad_request and are skipped; the provider keeps serving.
func Serve(ctx context.Context, r io.Reader, w io.Writer, h Handler, opts ServeOptions) error {
	opt.Logger(&opts.Logger)
	def := DefaultServeOptions()
	opt.Default(&opts.RequestTimeout, def.RequestTimeout)
	opt.Default(&opts.Concurrency, def.Concurrency)
	opt.Default(&opts.ShutdownGrace, def.ShutdownGrace)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	sess := NewSession(h, opts.Logger)
	out := &lineWriter{w: w}
	// Nothing may reach stdout once Serve has returned: a request still
	// running after shutdown is abandoned silently.
	defer out.close()
	sem := make(chan struct{}, opts.Concurrency)
	var wg sync.WaitGroup

	type lineOrErr struct {
		line    []byte
		tooLong bool
		err     error
	}
	lines := make(chan lineOrErr)
	// Reading happens in its own goroutine so `shutdown` handling and ctx
	// cancellation never wait on a blocked Read.
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, tooLong, err := readLine(br, MaxInputLine)
			select {
			case lines <- lineOrErr{line, tooLong, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	for {
		var l lineOrErr
		select {
		case l = <-lines:
		case <-ctx.Done():
			return ctx.Err()
		}
		if l.tooLong {
			if err := out.write(errorReply("", CodeBadRequest, fmt.Sprintf("line exceeds %d bytes", MaxInputLine))); err != nil {
				return err
			}
		} else if len(l.line) > 0 {
			reply, job, outcome := sess.Prepare(l.line)
			if outcome == Stop {
				// Replies already being computed get a short grace (a piped
				// script may send shutdown right after its queries); the
				// host kills us 2 s after shutdown, so never wait longer.
				waitGrace(&wg, opts.ShutdownGrace)
				return nil
			}
			if reply != nil {
				if err := out.write(reply); err != nil {
					return err
				}
			}
			if job != nil {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					jctx, jcancel := context.WithTimeout(ctx, opts.RequestTimeout)
					defer jcancel()
					if err := out.write(job(jctx)); err != nil {
						opts.Logger.Warn("cgp write failed", "err", err)
						cancel()
					}
				}()
			}
		}
		if l.err != nil {
			wg.Wait()
			if errors.Is(l.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("cgp: read: %w", l.err)
		}
	}
}

// lineWriter makes each envelope one Write, so concurrent replies never
// interleave and a pipe reader sees whole lines.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	closed bool
}

func (lw *lineWriter) close() {
	lw.mu.Lock()
	lw.closed = true
	lw.mu.Unlock()
}

func (lw *lineWriter) write(b []byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return nil
	}
	lw.buf = append(append(lw.buf[:0], b...), '\n')
	if _, err := lw.w.Write(lw.buf); err != nil {
		return fmt.Errorf("cgp: write: %w", err)
	}
	if f, ok := lw.w.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			return fmt.Errorf("cgp: flush: %w", err)
		}
	}
	return nil
}

// readLine returns the next line without its newline. A line longer than
// max is consumed to its newline and reported as tooLong with no bytes, so
// a hostile line costs bounded memory. A final line without a newline is
// returned together with io.EOF.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline itself
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, tooLong, err
	}
}

func waitGrace(wg *sync.WaitGroup, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
	}
}
