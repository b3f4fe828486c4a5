package cgptest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// HostMaxLine is what the reference host reads per provider line.
const HostMaxLine = 16 << 20

// Errors a Conn reports.
var (
	ErrNoReply = errors.New("no reply")
	ErrDied    = errors.New("provider closed its output")
)

// Target is a provider under test. Open gives a fresh connection: a new
// process for stdio (the reference runs some checks on a fresh process), a
// new stateless client for HTTP.
type Target interface {
	Name() string
	Stdio() bool
	Open(ctx context.Context) (Conn, error)
}

// Conn is one connection to a provider.
type Conn interface {
	// Send writes one raw line (stdio) or POSTs one body (HTTP).
	Send(raw []byte) error
	// Recv returns the next reply envelope, waiting at most timeout.
	Recv(timeout time.Duration) ([]byte, error)
	// Close tears down; for stdio it closes stdin, waits grace for an exit,
	// then kills the process group, and reports how it ended.
	Close(grace time.Duration) ExitInfo
	// LastStatus is the HTTP status of the last Send (0 for stdio).
	LastStatus() int
}

// ExitInfo is how a stdio provider ended.
type ExitInfo struct {
	Exited   bool // ended by itself within the grace period
	Code     int
	Killed   bool
	Duration time.Duration
}

// StdioTarget spawns a provider the way the reference host does: cleared
// environment plus PATH and HOME, its own process group, killed as a group,
// stdout read as lines of at most 16 MiB, stderr inherited.
type StdioTarget struct {
	Label string
	Path  string
	Args  []string
	// Stderr receives the provider's stderr (default os.Stderr).
	Stderr io.Writer
	// Record, if set, receives every line the provider writes.
	Record func(line []byte)
}

// Name implements Target.
func (t *StdioTarget) Name() string { return t.Label }

// Stdio implements Target.
func (t *StdioTarget) Stdio() bool { return true }

// Open implements Target.
func (t *StdioTarget) Open(ctx context.Context) (Conn, error) {
	cmd := exec.Command(t.Path, t.Args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = t.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", t.Path, err)
	}
	c := &stdioConn{cmd: cmd, stdin: stdin, lines: make(chan []byte, 64), done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(c.lines)
		br := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := readHostLine(br)
			if line != nil {
				if t.Record != nil {
					t.Record(line)
				}
				c.lines <- line
			}
			if err != nil {
				c.readErr = err
				return
			}
		}
	}()
	go func() {
		c.waitErr = cmd.Wait()
		c.ended = time.Now()
		close(c.done)
	}()
	return c, nil
}

// readHostLine reads one line, refusing lines over HostMaxLine as the
// reference host does (it treats them as a broken provider).
func readHostLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > HostMaxLine {
			return nil, fmt.Errorf("provider line exceeds %d bytes", HostMaxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 {
				return line, err
			}
			return nil, err
		}
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
}

type stdioConn struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan []byte
	readErr error
	done    chan struct{}
	waitErr error
	start   time.Time
	ended   time.Time
	once    sync.Once
}

func (c *stdioConn) Send(raw []byte) error {
	_, err := c.stdin.Write(append(append([]byte{}, raw...), '\n'))
	return err
}

func (c *stdioConn) Recv(timeout time.Duration) ([]byte, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return nil, fmt.Errorf("%w: %v", ErrDied, c.readErr)
		}
		return l, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("%w within %v", ErrNoReply, timeout)
	}
}

func (c *stdioConn) LastStatus() int { return 0 }

func (c *stdioConn) Close(grace time.Duration) ExitInfo {
	var info ExitInfo
	c.once.Do(func() { _ = c.stdin.Close() })
	t0 := time.Now()
	select {
	case <-c.done:
		info.Exited = true
	case <-time.After(grace):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		info.Killed = true
	}
	info.Duration = time.Since(t0)
	if c.cmd.ProcessState != nil {
		info.Code = c.cmd.ProcessState.ExitCode()
	}
	// Kill stragglers of the group either way, as the host does.
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	return info
}

// waitExit waits for the process to end by itself (after a shutdown).
func (c *stdioConn) waitExit(grace time.Duration) (ExitInfo, bool) {
	select {
	case <-c.done:
		return ExitInfo{Exited: true, Code: c.cmd.ProcessState.ExitCode(), Duration: c.ended.Sub(c.start)}, true
	case <-time.After(grace):
		return ExitInfo{}, false
	}
}

// HTTPTarget POSTs envelopes to URL, one per request.
type HTTPTarget struct {
	Label string
	URL   string
	// Token, if set, is sent as `Authorization: Bearer <Token>`.
	Token  string
	Client *http.Client
	Record func(line []byte)
}

// Name implements Target.
func (t *HTTPTarget) Name() string { return t.Label }

// Stdio implements Target.
func (t *HTTPTarget) Stdio() bool { return false }

// Open implements Target.
func (t *HTTPTarget) Open(ctx context.Context) (Conn, error) {
	cl := t.Client
	if cl == nil {
		cl = &http.Client{Timeout: 35 * time.Second}
	}
	return &httpConn{t: t, cl: cl, ctx: ctx}, nil
}

type httpConn struct {
	t      *HTTPTarget
	cl     *http.Client
	ctx    context.Context
	queue  [][]byte
	status int
}

func (c *httpConn) Send(raw []byte) error {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.t.URL, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.t.Token)
	}
	resp, err := c.cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, HostMaxLine+1))
	if err != nil {
		return err
	}
	c.status = resp.StatusCode
	if len(bytes.TrimSpace(body)) > 0 {
		if c.t.Record != nil && resp.StatusCode < 300 {
			c.t.Record(body)
		}
		c.queue = append(c.queue, body)
	}
	return nil
}

func (c *httpConn) Recv(time.Duration) ([]byte, error) {
	if len(c.queue) == 0 {
		return nil, ErrNoReply
	}
	b := c.queue[0]
	c.queue = c.queue[1:]
	return b, nil
}

func (c *httpConn) LastStatus() int { return c.status }

func (c *httpConn) Close(time.Duration) ExitInfo { return ExitInfo{Exited: true} }
