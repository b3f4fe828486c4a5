package ipc

import (
	"io"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func testQ(s *Server) *fairQ {
	c := &conn{srv: s}
	c.q = &fairQ{c: c, idx: -1}
	return c.q
}

// A job run by its caller (runIdle) takes a worker's place: with one
// worker, a job submitted meanwhile waits for it, and runIdle refuses
// while a worker's job runs or its connection has work queued.
func TestRunIdleHoldsAWorkersPlace(t *testing.T) {
	srv := &Server{opts: DefaultOptions()}
	s := newSched(1)
	defer s.stop()
	a, b := testQ(srv), testQ(srv)

	release := make(chan struct{})
	started := make(chan struct{})
	ranB := make(chan struct{})
	inline := make(chan bool, 1)
	go func() {
		inline <- s.runIdle(a, func() { close(started); <-release })
	}()
	<-started
	s.submit(b, func() { close(ranB) })
	select {
	case <-ranB:
		t.Fatal("a worker ran a job while the only worker's place was held by a job run in place")
	case <-time.After(50 * time.Millisecond):
	}
	if s.runIdle(b, func() { t.Error("ran beside a job of its connection waiting") }) {
		t.Fatal("runIdle ran a job while the connection had one queued")
	}
	close(release)
	if !<-inline {
		t.Fatal("runIdle refused an idle connection with a free worker")
	}
	select {
	case <-ranB:
	case <-time.After(10 * time.Second):
		t.Fatal("the job queued behind the one run in place never ran")
	}

	// A worker's job holds the place too.
	hold := make(chan struct{})
	running := make(chan struct{})
	s.submit(b, func() { close(running); <-hold })
	<-running
	if s.runIdle(a, func() { t.Error("ran past the worker bound") }) {
		t.Fatal("runIdle ran a job while every worker's place was taken")
	}
	close(hold)
}

// inputWaiting tells a socket with unread bytes from an empty one (on
// Linux; elsewhere it always says input may wait).
func TestInputWaiting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cl, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nc, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &conn{nc: nc}
	c.rc, _ = nc.SyscallConn()
	if runtime.GOOS != "linux" {
		if !c.inputWaiting() {
			t.Fatal("inputWaiting said no input where it cannot tell")
		}
		return
	}
	if c.inputWaiting() {
		t.Fatal("input waiting on a socket nothing was written to")
	}
	if _, err := cl.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the written bytes to be seen", c.inputWaiting)
	if _, err := io.ReadFull(nc, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	if c.inputWaiting() {
		t.Fatal("input waiting once everything was read")
	}
}
