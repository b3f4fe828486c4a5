package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/internal/opt"
	"github.com/cmbnode/cmbnode/node"
	"github.com/cmbnode/cmbnode/node/events"
)

// Options configure a Server. Zero values take the defaults noted, which
// DefaultOptions returns.
type Options struct {
	// Path is the socket file, normally $CMBNODE_HOME/daemon.sock.
	Path string
	Node Node
	// CGP answers query and verify; nil makes both reply `unavailable`.
	CGP    CGPHandler
	Logger *slog.Logger
	// MaxConns bounds simultaneous clients (1024). A client past it takes
	// the place of the idlest connection (see evictable); only when every
	// one is listening or busy is it told `unavailable` and closed.
	MaxConns int
	// MaxListeners bounds connections subscribed with listen (MaxConns/2).
	// Listeners are never closed to make room, so without it they could
	// take every place; a listen past it is refused `unavailable`.
	MaxListeners int
	// MaxInFlight bounds concurrently handled requests per connection (64);
	// the connection is not read further until one finishes.
	MaxInFlight int
	// WriteQueue is how many messages may wait to be written to one client
	// (1024). A client that lets it fill has stopped reading and is dropped.
	WriteQueue int
	// EventQueue is a listener's queue on the node's event bus (8192):
	// a burst that long waits for a listener that reads. The events in
	// it are shared with every other listener's (a slot is 32 bytes).
	EventQueue int
	// MessageTimeout bounds the time from a message's first byte to its
	// last (30 s), so a half-sent message cannot hold a connection forever.
	MessageTimeout time.Duration
	// WriteTimeout bounds one write to a client (10 s); a client that does
	// not drain its socket for that long is dropped.
	WriteTimeout time.Duration
	// HelloTimeout closes a connection that has sent nothing at all this
	// long after connecting (30 s): an honest client speaks first, and
	// silent connections would otherwise hold MaxConns' places forever.
	HelloTimeout time.Duration
	// IdleTimeout closes a connection that has spoken but then sent nothing
	// for this long, while it has no listen subscription and no request or
	// reply in flight; 0 (the default) never does, since agents keep
	// connections open between remembers.
	IdleTimeout time.Duration
	// MaxHeldBytes bounds what the server holds for all its clients
	// together: requests read and not yet answered, replies not yet
	// written (128 MiB). Past it the client holding the most is dropped.
	MaxHeldBytes int64
	// ConnHeldBytes is one client's allowance of the same (2 MiB): past
	// it the server reads nothing more from it until it reads its
	// replies. One message always fits.
	ConnHeldBytes int64
	// ConnReplyBytes is how much of one client's replies may wait to be
	// written (256 KiB) before none more of its requests run: a client
	// that does not read costs the daemon no more work.
	ConnReplyBytes int64
	// Workers is how many requests run at once over all clients
	// (8 × GOMAXPROCS, at least 16), taken in turn fairly between clients.
	Workers int
	// DrainTimeout is how long Serve waits, when stopping, for in-flight
	// requests to finish and their replies to be written (5 s).
	DrainTimeout time.Duration
}

// DefaultOptions returns the settings Listen uses for the fields left zero
// (or, for the numbers, zero or less). Path and Node have no default.
func DefaultOptions() Options {
	return Options{
		MaxConns:       1024,
		MaxInFlight:    64,
		WriteQueue:     1024,
		EventQueue:     8192,
		MessageTimeout: 30 * time.Second,
		HelloTimeout:   30 * time.Second,
		WriteTimeout:   10 * time.Second,
		DrainTimeout:   5 * time.Second,
		MaxHeldBytes:   128 << 20,
		ConnHeldBytes:  2 << 20,
		ConnReplyBytes: 256 << 10,
		Workers:        max(16, 8*runtime.GOMAXPROCS(0)),
	}
}

func (o *Options) defaults() {
	def := DefaultOptions()
	opt.Logger(&o.Logger)
	opt.Default(&o.MaxConns, def.MaxConns)
	opt.Default(&o.MaxListeners, max(o.MaxConns/2, 1))
	opt.Default(&o.MaxInFlight, def.MaxInFlight)
	opt.Default(&o.WriteQueue, def.WriteQueue)
	opt.Default(&o.EventQueue, def.EventQueue)
	opt.Default(&o.MessageTimeout, def.MessageTimeout)
	opt.Default(&o.HelloTimeout, def.HelloTimeout)
	opt.Default(&o.WriteTimeout, def.WriteTimeout)
	opt.Default(&o.DrainTimeout, def.DrainTimeout)
	opt.Default(&o.MaxHeldBytes, def.MaxHeldBytes)
	opt.Default(&o.ConnHeldBytes, def.ConnHeldBytes)
	opt.Default(&o.ConnReplyBytes, def.ConnReplyBytes)
	opt.Default(&o.Workers, def.Workers)
}

// Server serves the local socket.
type Server struct {
	opts Options
	node Node
	log  *slog.Logger
	ln   *net.UnixListener

	mu     sync.Mutex
	conns  map[*conn]struct{}
	nextID uint64

	clients  atomic.Int64 // connected now
	accepted atomic.Int64
	// held is what the server holds for all clients: the sum of conn.held.
	held    atomic.Int64
	sched   *sched
	dropped atomic.Int64 // dropped for not reading
	// idleClosed, evicted and refused count connection admission: closed
	// by HelloTimeout or IdleTimeout, closed to make room for a new
	// client, and new clients turned away with no room to make.
	idleClosed atomic.Int64
	evicted    atomic.Int64
	refused    atomic.Int64
	// listeners counts connections with a listen subscription;
	// listenRefused the listens refused at MaxListeners.
	listeners     atomic.Int64
	listenRefused atomic.Int64
	wg            sync.WaitGroup

	stopOnce sync.Once
	stopping chan struct{}
}

// Stats are the socket's counters.
type Stats struct {
	Clients  int64 // connected now
	Accepted int64 // ever
	Dropped  int64 // dropped for not reading what they were sent
	// HeldBytes is what the server holds for its clients now.
	HeldBytes int64
	// IdleClosed counts connections closed by HelloTimeout or IdleTimeout.
	IdleClosed int64
	// Evicted counts idle connections closed to make room for a new client
	// at MaxConns.
	Evicted int64
	// Refused counts clients turned away at MaxConns: every connection was
	// listening or busy.
	Refused int64
	// Listeners is how many connections listen now; ListenRefused counts
	// listens refused at MaxListeners.
	Listeners, ListenRefused int64
}

// InUseError means a live daemon already serves the socket.
type InUseError struct {
	Path string
	PID  int // 0 if unknown
}

func (e *InUseError) Error() string {
	who := "another cmbnode daemon"
	if e.PID > 0 {
		who = fmt.Sprintf("another cmbnode daemon (pid %d)", e.PID)
	}
	return fmt.Sprintf("%s is serving %s", who, e.Path)
}

// maxSocketPath is sun_path's size on Linux minus the terminating NUL.
const maxSocketPath = 107

// SocketPathTooLongError means the socket path does not fit in a Unix
// socket address: Len bytes, where the system takes at most Max.
type SocketPathTooLongError struct {
	Path     string
	Len, Max int
}

func (e *SocketPathTooLongError) Error() string {
	return fmt.Sprintf("socket path %s is %d bytes, over the system's %d", e.Path, e.Len, e.Max)
}

// Listen creates the socket at opts.Path with mode 0600. A socket file left
// by a crashed daemon (nothing accepts on it) is replaced; a live one means
// another daemon runs, and Listen refuses with an *InUseError.
func Listen(opts Options) (*Server, error) {
	opts.defaults()
	if opts.Node == nil {
		return nil, errors.New("ipc: Listen: no node")
	}
	path := opts.Path
	if len(path) > maxSocketPath {
		return nil, &SocketPathTooLongError{Path: path, Len: len(path), Max: maxSocketPath}
	}
	if err := clearStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	// The home directory is 0700, so nobody else can reach the socket in
	// the moment before this chmod.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict socket %s to its owner: %w", path, err)
	}
	return &Server{
		opts: opts, node: opts.Node, log: opts.Logger, ln: ln,
		conns: map[*conn]struct{}{}, stopping: make(chan struct{}), sched: newSched(opts.Workers),
	}, nil
}

// clearStale removes a socket file nothing listens on.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; move it aside", path)
	}
	if alive, pid := Probe(path); alive {
		return &InUseError{Path: path, PID: pid}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Probe reports whether something accepts connections on the socket at
// path, and the pid of the process that does when the system tells.
func Probe(path string) (alive bool, pid int) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		// ECONNREFUSED (no listener) and ENOENT are the stale cases; any
		// other error (say EACCES) still means nobody we can reach.
		return false, 0
	}
	defer c.Close()
	return true, peerPID(c)
}

// Stats reports the socket's counters.
func (s *Server) Stats() Stats {
	return Stats{
		Clients: s.clients.Load(), Accepted: s.accepted.Load(), Dropped: s.dropped.Load(), HeldBytes: s.held.Load(),
		IdleClosed: s.idleClosed.Load(), Evicted: s.evicted.Load(), Refused: s.refused.Load(),
		Listeners: s.listeners.Load(), ListenRefused: s.listenRefused.Load(),
	}
}

// Serve accepts clients until ctx is done or Close is called. Before it
// returns, requests in flight finish (within DrainTimeout), their replies
// are written, every connection is closed and the socket file is removed;
// so the node may be closed right after.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.stopping:
		}
	}()
	var tempDelay time.Duration
	for {
		nc, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.stopping:
				s.shutdown()
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors: back off rather than spin.
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				s.log.Warn("socket accept failed; retrying", "err", err, "in", tempDelay)
				time.Sleep(tempDelay)
				continue
			}
			s.Close()
			s.shutdown()
			return fmt.Errorf("accept on socket %s: %w", s.opts.Path, err)
		}
		tempDelay = 0
		s.accepted.Add(1)
		c := s.newConn(nc)
		if c == nil {
			msg := encodeError("", nil, Errorf(CodeUnavailable, "too many clients (%d); try again later", s.opts.MaxConns))
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			nc.Write(append(msg, '\n'))
			nc.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	}
}

// Close stops accepting and makes Serve wind down; it does not wait.
func (s *Server) Close() error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stopping)
		err = s.ln.Close() // unlinks the socket file
	})
	return err
}

func (s *Server) shutdown() {
	s.mu.Lock()
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.opts.DrainTimeout):
		s.log.Warn("socket clients did not finish in time; closing them", "after", s.opts.DrainTimeout)
		s.mu.Lock()
		for c := range s.conns {
			c.kill()
		}
		s.mu.Unlock()
		<-done
	}
	s.sched.stop()
}

func (s *Server) newConn(nc *net.UnixConn) *conn {
	s.mu.Lock()
	var victim *conn
	if len(s.conns) >= s.opts.MaxConns {
		if victim = s.idlest(); victim == nil {
			s.mu.Unlock()
			s.refused.Add(1)
			return nil
		}
		// The victim's place is the new client's from now on, though its
		// goroutines wind down after: forget does not count it twice.
		delete(s.conns, victim)
		s.clients.Add(-1)
	}
	defer func() {
		s.mu.Unlock()
		if victim != nil {
			n := s.evicted.Add(1)
			s.log.Debug("closed an idle socket client to make room for a new one", "client", victim.id,
				"spoke", victim.spoke.Load(), "maxConns", s.opts.MaxConns, "evictedTotal", n)
			victim.kill()
		}
	}()
	s.nextID++
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		srv: s, nc: nc, id: s.nextID, br: bufio.NewReaderSize(nc, 16<<10),
		out: make(chan outMsg, s.opts.WriteQueue), dead: make(chan struct{}),
		readDone: make(chan struct{}), writerDone: make(chan struct{}),
		sem: make(chan struct{}, s.opts.MaxInFlight), ctx: ctx, cancel: cancel,
		drained: make(chan struct{}, 1),
	}
	c.q = &fairQ{c: c, idx: -1}
	c.rc, _ = nc.SyscallConn() // nil on error: replies then all go through the writer
	c.wattempt = func(fd uintptr) bool {
		c.wn, c.werr = syscall.Write(int(fd), c.wbuf)
		return true // never wait: what is left goes to the writer
	}
	c.idleSince.Store(time.Now().UnixNano())
	s.conns[c] = struct{}{}
	s.clients.Add(1)
	return c
}

// idlest picks the connection a new client may replace at MaxConns: of
// the evictable ones, one that never sent anything before one that did,
// then the one waiting longest. Silent connections go first, oldest
// first, so a flood of them evicts its own before any agent that spoke,
// and a client that just connected is the last of them to go. Called
// with s.mu held.
func (s *Server) idlest() *conn {
	var best *conn
	var bestSpoke bool
	var bestSince int64
	for c := range s.conns {
		since, ok := c.evictable()
		if !ok {
			continue
		}
		spoke := c.spoke.Load()
		if best == nil || (!spoke && bestSpoke) || (spoke == bestSpoke && since < bestSince) {
			best, bestSpoke, bestSince = c, spoke, since
		}
	}
	return best
}

// evictable reports whether closing c loses nothing but an open socket:
// it is waiting for a message to start, holds no request or reply, and
// is not listening. since is when it began to wait.
func (c *conn) evictable() (since int64, ok bool) {
	since = c.idleSince.Load()
	if since == 0 || c.isDead() || c.listening.Load() || c.held.Load() > 0 {
		return 0, false
	}
	return since, true
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	_, ok := s.conns[c]
	delete(s.conns, c)
	s.mu.Unlock()
	if ok {
		s.clients.Add(-1)
	}
}

// conn is one client. Its reader runs in serve; a writer goroutine owns
// the socket's write side and, once the client listens, also drains the
// client's queue on the event bus. Replies and events are queued apart, so
// a burst of events cannot crowd out a reply.
type conn struct {
	srv    *Server
	nc     *net.UnixConn
	id     uint64
	br     *bufio.Reader
	buf    []byte
	framed bool

	out chan outMsg
	// wmu is held for every write to the socket: by the writer, and by a
	// worker writing its reply itself (sendNow). queued counts the replies
	// in out or taken from it and not yet written; a reply is written
	// directly only while it is 0, so replies go out in the order sent.
	wmu    sync.Mutex
	queued atomic.Int64
	wbuf   []byte          // sendNow's frame, under wmu
	rc     syscall.RawConn // nc's descriptor, for sendNow's one non-blocking write
	// wattempt is that write, made once so that a reply allocates no
	// closure; it writes wbuf and sets wn, werr (all under wmu).
	wattempt   func(fd uintptr) bool
	wn         int
	werr       error
	dead       chan struct{} // closed when the connection is finished
	deadOnce   sync.Once
	readDone   chan struct{} // closed when the reader stops: writer drains then exits
	writerDone chan struct{}
	stopRead   atomic.Bool

	sem      chan struct{}
	inflight sync.WaitGroup
	ctx      context.Context // cancelled when the connection is killed
	cancel   context.CancelFunc

	subMu sync.Mutex
	sub   *events.Sub
	// listening is set once sub is: read without subMu by idlest, which
	// holds s.mu (taken under subMu by listen's hold).
	listening atomic.Bool

	// spoke is set once the client's first byte arrived; idleSince is when
	// it began waiting for its next message (Unix ns), 0 while one is
	// being read or processed.
	spoke     atomic.Bool
	idleSince atomic.Int64

	// held is what the server holds for this client: requests read and
	// not yet answered, replies queued and not yet written. The reader
	// waits while it is over ConnHeldBytes; drained wakes it.
	held    atomic.Int64
	drained chan struct{}
	// unsent is the part of held that is replies not yet written.
	unsent atomic.Int64
	q      *fairQ

	// The pipeline of id-less remembers and publishes, the reader's own:
	// how many were submitted since it last waited for everything, and
	// the channel closed once the last of them has queued its reply.
	piped    int
	pipeTail chan struct{}
	// probe asks the socket whether more input waits (runHere).
	probe inputProbe
}

// hold counts n bytes held for c; over the server's budget, the client
// holding the most is dropped (it may be c).
func (c *conn) hold(n int) {
	c.held.Add(int64(n))
	if c.srv.held.Add(int64(n)) > c.srv.opts.MaxHeldBytes {
		c.srv.dropWorst()
	}
}

// release uncounts n bytes, and lets c's reader go on once it is under
// its allowance.
func (c *conn) release(n int) {
	c.srv.held.Add(-int64(n))
	if c.held.Add(-int64(n)) <= c.srv.opts.ConnHeldBytes {
		select {
		case c.drained <- struct{}{}:
		default:
		}
	}
}

// holdReply and releaseReply count a reply from queued to written; its
// client's requests run again once few enough of its replies wait.
func (c *conn) holdReply(n int) {
	c.unsent.Add(int64(n))
	c.hold(n)
}

func (c *conn) releaseReply(n int) {
	c.release(n)
	if c.unsent.Add(-int64(n)) <= c.srv.opts.ConnReplyBytes {
		c.srv.sched.unpark(c.q)
	}
}

func (c *conn) overAllowance() bool { return c.held.Load() > c.srv.opts.ConnHeldBytes }

// repliesWait reports whether more of c's replies wait to be written than
// it may have: it is not reading them.
func (c *conn) repliesWait() bool { return c.unsent.Load() > c.srv.opts.ConnReplyBytes }

// dropWorst drops the live client holding the most, while what live
// clients hold is over the budget: memory the daemon holds for clients is
// bounded whatever they send, and the one that caused it goes first.
func (s *Server) dropWorst() {
	s.mu.Lock()
	var worst *conn
	var live int64
	for c := range s.conns {
		if c.isDead() {
			continue
		}
		h := c.held.Load()
		live += h
		if worst == nil || h > worst.held.Load() {
			worst = c
		}
	}
	s.mu.Unlock()
	if worst != nil && live > s.opts.MaxHeldBytes {
		worst.drop(fmt.Sprintf("the socket holds %d bytes for its clients, over its %d-byte budget, and this client holds the most (%d)",
			live, s.opts.MaxHeldBytes, worst.held.Load()))
	}
}

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

var errTooLarge = errors.New("message too large")

func (c *conn) serve() {
	defer c.srv.forget(c)
	go c.writer()
	c.readLoop()
	// Finish what was asked, then let the writer flush the replies. A
	// client's EOF ends the connection, listener or not: a closed socket
	// and a half-closed one look the same from here until a write fails,
	// and keeping gone listeners until then would let them pile up.
	c.inflight.Wait()
	c.closeSub()
	close(c.readDone)
	select {
	case <-c.writerDone:
	case <-time.After(c.srv.opts.WriteTimeout):
	}
	c.kill()
	<-c.writerDone
	// Nothing adds to held any more: give back what is left unwritten.
	c.releaseQueued()
	if n := c.held.Swap(0); n != 0 {
		c.srv.held.Add(-n)
	}
	c.unsent.Store(0)
}

// stopReading makes the reader return at its next read (server shutdown).
func (c *conn) stopReading() {
	c.stopRead.Store(true)
	c.nc.SetReadDeadline(time.Now())
}

// kill closes the connection at once.
func (c *conn) kill() {
	c.deadOnce.Do(func() {
		close(c.dead)
		c.cancel()
		c.nc.Close()
	})
	// Its queued requests are not left to wait their turn: they run here,
	// finding the connection gone, and give back what they held.
	for _, job := range c.srv.sched.take(c.q) {
		job()
	}
	// Nor are its queued replies kept until the connection's goroutines
	// end (they may wait for requests in flight, or the write timeout): a
	// dropped client's bytes leave the budget when it is dropped, so the
	// clients dropped one after another in a flood do not pile up over it.
	c.releaseQueued()
}

// releaseQueued takes the messages waiting to be written out of the queue
// and gives back the bytes they held.
func (c *conn) releaseQueued() {
	for {
		select {
		case m := <-c.out:
			c.releaseReply(len(m.b))
		default:
			return
		}
	}
}

// drop disconnects a client that stopped reading.
func (c *conn) drop(reason string) {
	select {
	case <-c.dead:
		return
	default:
	}
	n := c.srv.dropped.Add(1)
	c.srv.log.Warn("dropping socket client that stopped reading", "client", c.id, "reason", reason, "droppedTotal", n)
	c.kill()
}

// outMsg is one queued message. The listen reply carries the new
// subscription, so the writer starts on events only after writing it.
// framed is the rest of a message sendNow wrote in part: already framed.
type outMsg struct {
	b      []byte
	sub    *events.Sub
	replay *node.Replay
	framed bool
}

// send writes one message, or queues it, without ever blocking: a full
// queue means the client stopped reading, and it is dropped.
func (c *conn) send(b []byte) bool {
	if ok, done := c.sendNow(b); done {
		return ok
	}
	return c.enqueue(outMsg{b: b})
}

// sendNow writes b at once, from the caller's goroutine, when no reply is
// queued before it and the writer is not writing: one non-blocking write,
// which a client that reads takes whole. Handing every reply to the writer
// goroutine cost a wake-up per request. What the socket does not take goes
// to the writer as the rest of a framed message, queued before wmu is let
// go, so nothing overtakes it. done is false when b was not written (the
// caller queues it).
func (c *conn) sendNow(b []byte) (ok, done bool) {
	if c.rc == nil || len(b) > 64<<10 || c.queued.Load() != 0 || !c.wmu.TryLock() {
		return false, false
	}
	if c.queued.Load() != 0 || c.isDead() {
		c.wmu.Unlock()
		return false, false
	}
	c.wbuf = appendFramed(c.wbuf[:0], b, c.framed)
	n, err := c.writeNonBlocking()
	if err != nil {
		c.wmu.Unlock()
		c.kill()
		return false, true
	}
	if n < len(c.wbuf) {
		ok = c.enqueue(outMsg{b: bytes.Clone(c.wbuf[n:]), framed: true})
	} else {
		ok = true
	}
	if cap(c.wbuf) > 16<<10 {
		c.wbuf = nil
	}
	c.wmu.Unlock()
	return ok, true
}

// writeNonBlocking makes one write of wbuf to the socket that does not
// wait for room: it returns how much the socket took, 0 when it is full.
// Called with wmu held.
func (c *conn) writeNonBlocking() (int, error) {
	c.wn, c.werr = 0, nil
	err := c.rc.Write(c.wattempt)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The writer's deadline of its last write has passed; this write
		// never waits, so it needs none.
		c.nc.SetWriteDeadline(time.Time{})
		err = c.rc.Write(c.wattempt)
	}
	if err == nil {
		err = c.werr
	}
	switch {
	case err == nil:
		return c.wn, nil
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) || errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	default:
		return 0, err
	}
}

// appendFramed appends b to dst as one message: a length before it on a
// framed connection, a newline after it on an NDJSON one.
func appendFramed(dst, b []byte, framed bool) []byte {
	if framed {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
		return append(dst, b...)
	}
	return append(append(dst, b...), '\n')
}

func (c *conn) enqueue(m outMsg) bool {
	select {
	case <-c.dead:
		return false
	default:
	}
	c.holdReply(len(m.b))
	c.queued.Add(1)
	select {
	case c.out <- m:
		return true
	default:
		c.queued.Add(-1)
		c.releaseReply(len(m.b))
		c.drop(fmt.Sprintf("write queue of %d messages is full", cap(c.out)))
		return false
	}
}

var newline = []byte{'\n'}

func (c *conn) writer() {
	defer close(c.writerDone)
	var writeFrame func() bool
	var writeBufs func(net.Buffers) bool
	var frame []byte
	appendMsg := func(dst, b []byte) []byte { return appendFramed(dst, b, c.framed) }
	var head [4]byte
	write := func(b []byte, framed bool) bool {
		if framed {
			return writeBufs(net.Buffers{b})
		}
		if len(b) <= 64<<10 {
			frame = appendMsg(frame[:0], b)
			return writeFrame()
		}
		// A large reply goes out as it is, its delimiter beside it in the
		// same writev: copied into frame, every recall reply of a flood
		// would be allocated twice.
		if c.framed {
			binary.BigEndian.PutUint32(head[:], uint32(len(b)))
			return writeBufs(net.Buffers{head[:], b})
		}
		return writeBufs(net.Buffers{b, newline})
	}
	writeFrame = func() bool {
		return writeBufs(net.Buffers{frame})
	}
	writeBufs = func(bufs net.Buffers) bool {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
		if _, err := bufs.WriteTo(c.nc); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.drop(fmt.Sprintf("a write did not complete in %s", c.srv.opts.WriteTimeout))
			} else {
				c.kill()
			}
			return false
		}
		if cap(frame) > 64<<10 {
			frame = nil
		}
		return true
	}
	var evC <-chan events.Event // nil until the listen reply (and any replay) is written
	// A listen after a cursor replays first (replay, then sub's events);
	// skip is the last record it passed: live events up to it were
	// replayed already.
	var replay *node.Replay
	var sub *events.Sub
	var skip uint64
	writeMsg := func(m outMsg) bool {
		ok := write(m.b, m.framed)
		c.queued.Add(-1) // only now: a reply sent meanwhile waits behind m
		c.releaseReply(len(m.b))
		if !ok {
			return false
		}
		if m.sub != nil {
			if m.replay != nil {
				replay, sub = m.replay, m.sub
			} else {
				evC = m.sub.C
			}
		}
		return true
	}
	// Events go out together, in one write: a listener that reads keeps
	// up with a burst at a syscall per batch, where one per event fell
	// behind and was dropped. Events being written count against the
	// budget as replies do, so listeners that do not read are bounded by
	// it too.
	flush := func() bool {
		n := len(frame)
		if n == 0 {
			return true
		}
		c.holdReply(n)
		ok := writeFrame()
		c.releaseReply(n)
		frame = frame[:0]
		return ok
	}
	var scratch []byte // an event's encoding, reused: it is copied into frame
	addEvent := func(ev events.Event) bool {
		b, ok := c.srv.eventBytes(scratch[:0], ev)
		if !ok {
			return true
		}
		scratch = b
		if len(frame) > 0 && len(frame)+len(b) > eventBatchBytes && !flush() {
			return false
		}
		frame = appendMsg(frame, b)
		return true
	}
	drainReplies := func() {
		for {
			select {
			case m := <-c.out:
				if !writeMsg(m) {
					return
				}
			default:
				return
			}
		}
	}
	for {
		if replay != nil {
			// Replies first; the replay goes out a batch at a time
			// between them, its live events waiting in sub meanwhile.
			select {
			case m := <-c.out:
				if !writeMsg(m) {
					return
				}
				continue
			case <-c.readDone:
				drainReplies()
				return
			case <-c.dead:
				return
			default:
			}
			evs, done, err := replay.Next(c.ctx, eventBatch)
			if err != nil {
				if errors.Is(err, node.ErrCursorExpired) {
					c.drop(err.Error())
				} else if c.ctx.Err() == nil {
					c.srv.log.Error("socket listen replay failed", "client", c.id, "err", err)
					c.kill()
				}
				return
			}
			frame = frame[:0]
			for _, ev := range evs {
				if !addEvent(events.Event{Name: events.CMBAccepted, Data: ev}) {
					return
				}
			}
			if !flush() {
				return
			}
			if done {
				skip, evC, replay = replay.Last(), sub.C, nil
			}
			continue
		}
		select {
		case m := <-c.out:
			if !writeMsg(m) {
				return
			}
		case ev := <-evC:
			frame = frame[:0]
			for n := 1; ; n++ {
				replayed := false
				if a, ok := ev.Data.(node.AcceptedEvent); ok && skip > 0 {
					// The bus delivers in seq order: past skip, none is.
					if replayed = a.Seq <= skip; !replayed {
						skip = 0
					}
				}
				if !replayed && !addEvent(ev) {
					return
				}
				if n == eventBatch {
					break
				}
				var more bool
				select {
				case ev, more = <-evC:
				default:
				}
				if !more {
					break
				}
			}
			if !flush() {
				return
			}
		case <-c.readDone:
			drainReplies()
			return
		case <-c.dead:
			return
		}
	}
}

// eventBatch and eventBatchBytes bound the events written in one go.
const (
	eventBatch      = 64
	eventBatchBytes = 32 << 10
)

// eventBytes appends ev's message to dst; false means it is not sent.
func (s *Server) eventBytes(dst []byte, ev events.Event) ([]byte, bool) {
	b, err := encodeEvent(dst, ev.Name, ev.Data)
	if err != nil {
		s.log.Error("socket event not sent", "event", ev.Name, "err", err)
		return dst, false
	}
	if len(b) > MaxMessage {
		s.log.Warn("socket event over the message limit not sent", "event", ev.Name, "bytes", len(b))
		return b, false
	}
	return b, true
}

func (c *conn) readLoop() {
	first := true
	for {
		if c.stopRead.Load() {
			return
		}
		// Read nothing more from a client that does not read its
		// replies: what it sent stays in its socket, not in the daemon.
		for c.overAllowance() {
			select {
			case <-c.drained:
			case <-c.dead:
				return
			}
		}
		msg, err := c.readMessage(first)
		first = false
		switch {
		case errors.Is(err, errTooLarge):
			c.sendInOrder(encodeError("", nil, Errorf(CodeTooLarge, "message is over the %d-byte limit; nothing of it was used", MaxMessage)))
			continue
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !c.stopRead.Load() {
				c.srv.log.Debug("socket client timed out", "client", c.id, "err", err)
			}
			return
		}
		if !c.process(msg) {
			return
		}
	}
}

// readMessage reads one NDJSON line or one frame. While waiting for a
// message to start, only HelloTimeout (before the first) or IdleTimeout
// (after it) applies, and neither closes a connection that listens or has
// a request or reply in flight: its wait starts over. Once a message's
// first byte is in, all of it must arrive within MessageTimeout.
func (c *conn) readMessage(first bool) ([]byte, error) {
	o := &c.srv.opts
	c.idleSince.Store(time.Now().UnixNano())
	var b []byte
	for {
		var idle time.Time
		if limit := c.idleLimit(); limit > 0 {
			idle = time.Now().Add(limit)
		}
		// Each deadline is set before stopRead is checked, so a concurrent
		// stopReading (which sets the flag, then a past deadline) always wins.
		c.nc.SetReadDeadline(idle)
		if c.stopRead.Load() {
			return nil, net.ErrClosed
		}
		var err error
		b, err = c.br.Peek(1)
		if err == nil {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || c.stopRead.Load() {
			return nil, err
		}
		if c.listening.Load() || c.held.Load() > 0 {
			continue // not idle: it listens, or waits for a reply
		}
		n := c.srv.idleClosed.Add(1)
		c.srv.log.Debug("closing idle socket client", "client", c.id, "spoke", c.spoke.Load(), "idleClosedTotal", n)
		return nil, err
	}
	c.idleSince.Store(0)
	c.spoke.Store(true)
	if first {
		c.framed = b[0] == 0x00
	}
	c.nc.SetReadDeadline(time.Now().Add(o.MessageTimeout))
	if c.stopRead.Load() {
		return nil, net.ErrClosed
	}
	if c.framed {
		return c.readFrame()
	}
	return c.readLine()
}

func (c *conn) readLine() ([]byte, error) {
	c.buf = c.buf[:0]
	for {
		part, err := c.br.ReadSlice('\n')
		if len(c.buf)+len(part) > MaxMessage+2 { // +2: a trailing \r\n is not the message
			return nil, c.discardLine(err)
		}
		c.buf = append(c.buf, part...)
		switch {
		case err == nil:
			return c.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(c.buf) > 0:
			return c.buf, nil // a last line without its newline still counts
		default:
			return nil, err
		}
	}
}

// discardLine skips to the end of an oversized line, keeping the
// connection in step. Each chunk read renews the deadline: the client is
// making progress, and nothing it sends is kept.
func (c *conn) discardLine(err error) error {
	c.buf = c.buf[:0]
	for errors.Is(err, bufio.ErrBufferFull) {
		c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.MessageTimeout))
		if c.stopRead.Load() {
			return net.ErrClosed
		}
		_, err = c.br.ReadSlice('\n')
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return errTooLarge
}

func (c *conn) readFrame() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxMessage {
		// Skip the payload so the next frame lines up.
		for left := int64(n); left > 0; {
			c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.MessageTimeout))
			if c.stopRead.Load() {
				return nil, net.ErrClosed
			}
			k, err := io.CopyN(io.Discard, c.br, min(left, 64<<10))
			left -= k
			if err != nil {
				return nil, err
			}
		}
		return nil, errTooLarge
	}
	if cap(c.buf) < int(n) {
		c.buf = make([]byte, n)
	}
	c.buf = c.buf[:n]
	if _, err := io.ReadFull(c.br, c.buf); err != nil {
		return nil, err
	}
	return c.buf, nil
}

// process decodes one message and runs it. Requests carrying an id run
// concurrently (up to MaxInFlight) and may be answered out of order;
// a request without one waits for everything before it and is answered
// before anything after it is read, so id-less clients such as the
// reference runtime's get replies in request order. The exception is a
// run of id-less remembers and publishes: they are pipelined (each
// starts without waiting for the one before, so they share the store's
// group commits) and answered in request order; whatever comes after
// the run waits for all of it.
func (c *conn) process(msg []byte) bool {
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 {
		if c.framed {
			c.sendInOrder(encodeError("", nil, Errorf(CodeBadRequest, "empty frame")))
		}
		return true // blank lines are allowed between NDJSON messages
	}
	m, err := decodeMessage(msg)
	if err != nil || m == nil {
		reason := "not a JSON object"
		if err != nil {
			reason = err.Error()
		}
		c.sendInOrder(encodeError("", nil, Errorf(CodeBadRequest, "malformed request: %s", reason)))
		return true
	}
	// Text that is not UTF-8 is refused before anything of the request is
	// used or echoed: repaired, it would be signed as text the agent did
	// not send, and echoed raw (an id) it would make the reply invalid JSON.
	if member, problem := badTextRaw(msg, m); member != "" {
		var id json.RawMessage
		if member != "id" && validID(m["id"]) {
			id = m["id"]
		}
		c.sendInOrder(encodeError("", id, badTextError(member, problem)))
		return true
	}
	id := m["id"]
	if string(id) == "null" {
		id = nil
	}
	if !validID(id) {
		c.sendInOrder(encodeError("", nil, Errorf(CodeBadRequest, "id must be a string or a number")))
		return true
	}
	var typ string
	if raw, ok := m["type"]; !ok {
		c.sendInOrder(encodeError("", id, Errorf(CodeBadRequest, "missing member \"type\"")))
		return true
	} else if typ, _ = cmb.StringValue(raw); typ == "" {
		c.sendInOrder(encodeError("", id, Errorf(CodeBadRequest, "type must be a non-empty string")))
		return true
	}
	if cap(c.buf) > 256<<10 {
		c.buf = nil // one huge message should not pin a megabyte per idle client
	}
	// The request is held until its reply is queued (which holds the reply).
	size := len(msg)
	c.hold(size)
	piped := id == nil && (typ == TypeRemember || typ == TypePublish)
	if !piped {
		c.flushPipe()
	}
	if id == nil && !(piped && c.piped > 0) {
		c.inflight.Wait()
	}
	select {
	case c.sem <- struct{}{}:
	case <-c.dead:
		c.release(size)
		return false
	}
	// A piped request's reply waits for the one before it (prev) and
	// lets the next go (done). Both are set before run is made, which
	// then captures their values, not the variables.
	var prev, done chan struct{}
	if piped {
		prev, done = c.pipeTail, make(chan struct{})
		c.pipeTail = done
		c.piped++
	}
	run := func() {
		defer func() { <-c.sem; c.inflight.Done(); c.release(size) }()
		if done != nil {
			defer close(done)
		}
		if c.ctx.Err() != nil {
			return // dropped meanwhile: nobody will read the reply
		}
		reply := c.srv.limitReply(typ, id, c.handle(c.ctx, typ, id, m))
		if prev != nil {
			select {
			case <-prev:
			case <-c.dead:
				return
			}
		}
		if reply != nil {
			c.send(reply)
		}
	}
	c.inflight.Add(1)
	if !c.runHere(typ, id == nil && !piped) || !c.srv.sched.runIdle(c.q, run) {
		c.srv.sched.submit(c.q, run)
	}
	if id == nil && !piped {
		c.inflight.Wait()
	}
	return true
}

// runHere says whether the reader may run a request itself, if a worker's
// place is free (sched.runIdle), rather than hand it to a worker: while it
// runs, nothing more is read from the connection. That is so anyway for a
// request the reader waits for (waits). A remember or publish (bounded by
// one commit) may also run here when nothing more has arrived: one that
// came behind it would wait to be read, not run beside it, so a client
// that sends several at once still has them share commits. Slower
// requests always go to a worker, so a quick one sent after them is
// answered first.
func (c *conn) runHere(typ string, waits bool) bool {
	if waits {
		return true
	}
	return (typ == TypeRemember || typ == TypePublish) && c.br.Buffered() == 0 && !c.inputWaiting()
}

// decodeMessage is json.Unmarshal of msg into a message, with one scan
// of a valid object (cmb.ValidJSON, json.Valid's verdict at a fraction of
// its cost on text) and a walk of its members instead of a scan and a
// decode that copies every member. The members are slices of
// a copy of msg: the reader reuses msg's buffer for the next message
// while this one's handler runs. Anything else takes json.Unmarshal, for
// its error.
func decodeMessage(msg []byte) (message, error) {
	if len(msg) > 0 && msg[0] == '{' && cmb.ValidJSON(msg) {
		return cmb.ObjectMembers(bytes.Clone(msg)), nil
	}
	var m message
	err := json.Unmarshal(msg, &m)
	return m, err
}

// sendInOrder sends a reply the reader itself makes, after the
// pipeline's replies, which were asked for before it.
func (c *conn) sendInOrder(b []byte) bool {
	c.flushPipe()
	return c.send(b)
}

// flushPipe waits until every request of the pipeline has been answered.
func (c *conn) flushPipe() {
	if c.piped > 0 {
		c.inflight.Wait()
		c.piped, c.pipeTail = 0, nil
	}
}

// limitReply keeps replies within the message cap too.
func (s *Server) limitReply(typ string, id json.RawMessage, b []byte) []byte {
	if len(b) <= MaxMessage {
		return b
	}
	return encodeError(typ, id, Errorf(CodeTooLarge, "the reply would be %d bytes, over the %d-byte limit; ask for less (a lower limit or depth)", len(b), MaxMessage))
}

// idleLimit is how long the connection may wait for its next message to
// start: HelloTimeout until it has sent anything, then IdleTimeout.
func (c *conn) idleLimit() time.Duration {
	if !c.spoke.Load() {
		return c.srv.opts.HelloTimeout
	}
	return c.srv.opts.IdleTimeout
}

func (c *conn) closeSub() {
	c.subMu.Lock()
	sub := c.sub
	c.subMu.Unlock()
	if sub != nil {
		sub.Close()
	}
}

// listen subscribes the connection to the node's events. The writer
// starts taking events only after writing the reply, so it comes first.
// With after (a cursor), the writer first replays the records accepted
// after it. The subscription is made before the head is read, so every
// record numbered after the head reaches the subscription: the replay
// runs at least to the head, and the writer skips live events it replayed.
func (c *conn) listen(typ string, id json.RawMessage, after *string) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.sub != nil {
		if after != nil {
			return Errorf(CodeBadRequest, "this connection already listens; resume `after` a cursor on a new connection")
		}
		cursor, _ := c.srv.node.Head()
		reply, err := listenReply(typ, id, cursor)
		if err != nil {
			return err
		}
		c.send(reply)
		return nil
	}
	var replay *node.Replay
	if after != nil {
		var err error
		if replay, err = c.srv.node.ReplayAfter(*after); err != nil {
			return err
		}
	}
	if n := c.srv.listeners.Add(1); n > int64(c.srv.opts.MaxListeners) {
		c.srv.listeners.Add(-1)
		c.srv.listenRefused.Add(1)
		return Errorf(CodeUnavailable, "too many listeners (%d); try again later", c.srv.opts.MaxListeners)
	}
	sub := c.srv.node.Events().Subscribe(c.srv.opts.EventQueue)
	cursor, _ := c.srv.node.Head()
	reply, err := listenReply(typ, id, cursor)
	if err != nil || !c.enqueue(outMsg{b: reply, sub: sub, replay: replay}) {
		sub.Close()
		c.srv.listeners.Add(-1)
		return err
	}
	c.sub = sub
	c.listening.Store(true)
	go c.watch(sub)
	return nil
}

// listenReply says the connection is subscribed and names the cursor its
// live events start after: a listener dropped before it read any can
// resume from it.
func listenReply(typ string, id json.RawMessage, cursor string) ([]byte, error) {
	return encodeResult(typ, id, map[string]string{"status": "subscribed", "cursor": cursor})
}

// watch drops the client when the bus gives up on it: the writer could
// not keep its event queue drained, so the client is not reading.
func (c *conn) watch(sub *events.Sub) {
	defer c.srv.listeners.Add(-1)
	select {
	case <-sub.Done():
		if sub.Overflowed.Load() {
			c.drop(fmt.Sprintf("event queue of %d is full", c.srv.opts.EventQueue))
		}
	case <-c.dead:
		sub.Close()
	}
}
