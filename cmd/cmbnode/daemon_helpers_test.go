package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The built binary is shared by every test and benchmark in the package;
// TestMain removes it.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binary builds cmd/cmbnode once per test run.
func binary(tb testing.TB) string {
	tb.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "cmbnode-bin-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "cmbnode")
		out, err := exec.Command("go", "build", "-o", built.path, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return built.path
}

// builtFrom names the source the daemon binary was built from: its
// directory and VCS revision (with "+dirty" for uncommitted changes). The
// binary is built from the working directory, not from the code in the
// test binary, so a benchmark run from another checkout measures that
// checkout's daemon; benchmarks print this to make that visible.
func builtFrom(tb testing.TB) string {
	tb.Helper()
	dir, _ := os.Getwd()
	rev, dirty := "", ""
	if info, err := buildinfo.ReadFile(binary(tb)); err == nil {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 7:
				rev = s.Value[:7]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		// Built with -buildvcs=false (GOFLAGS may say so): ask git.
		out, err := exec.Command("git", "-C", dir, "describe", "--always", "--dirty=+dirty").Output()
		if err != nil {
			return dir + " (revision unknown)"
		}
		return dir + " at " + strings.TrimSpace(string(out))
	}
	return dir + " at " + rev + dirty
}

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemonProc is a `cmbnode daemon` child process.
type daemonProc struct {
	cmd    *exec.Cmd
	home   string
	sock   string
	logs   *lockedBuffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
	ready  time.Duration
}

// startDaemon runs the binary as a daemon on home and waits for its
// "ready" log line (the timeout only bounds a broken build).
func startDaemon(tb testing.TB, home string, args ...string) *daemonProc {
	tb.Helper()
	d, err := spawnDaemon(tb, home, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// testNetArgs keeps test daemons on loopback with mDNS off: tests send
// nothing beyond 127.0.0.1 (no multicast), whatever the defaults are.
func testNetArgs(args []string) []string {
	out := []string{"--no-mdns"}
	if !slices.Contains(args, "--listen") {
		out = append(out, "--listen", "/ip4/127.0.0.1/tcp/0")
	}
	return append(out, args...)
}

func spawnDaemon(tb testing.TB, home string, args ...string) (*daemonProc, error) {
	return spawnDaemonEnv(tb, home, []string{"CMBNODE_HOME="}, append([]string{"daemon", "--home", home}, testNetArgs(args)...)...)
}

// spawnDaemonEnv runs the binary with args (the whole command line) and
// env added to the test's environment, as a daemon whose home is home.
func spawnDaemonEnv(tb testing.TB, home string, env []string, args ...string) (*daemonProc, error) {
	cmd := exec.Command(binary(tb), args...)
	cmd.Env = append(os.Environ(), env...)
	return spawnCmd(tb, home, cmd)
}

// spawnCmd starts cmd, a daemon whose home is home (possibly wrapped, as
// in `ip netns exec NS cmbnode daemon …`), and waits for its ready line.
func spawnCmd(tb testing.TB, home string, cmd *exec.Cmd) (*daemonProc, error) {
	pr, pw := io.Pipe()
	logs := &lockedBuffer{}
	cmd.Stderr = pw
	d := &daemonProc{cmd: cmd, home: home, sock: filepath.Join(home, "daemon.sock"), logs: logs, exited: make(chan struct{})}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		// Lines of any length: a Scanner stops at its first line over 64
		// KiB, and a daemon whose stderr nobody drains blocks in its
		// logger, stalling whatever logs.
		br := bufio.NewReader(pr)
		seen := false
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				logs.Write([]byte(strings.TrimSuffix(line, "\n") + "\n"))
				if !seen && (strings.Contains(line, "msg=ready") || strings.Contains(line, `"msg":"ready"`)) {
					seen = true
					close(ready)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		d.err = cmd.Wait()
		pw.Close()
		close(d.exited)
	}()
	tb.Cleanup(func() { d.kill() })
	select {
	case <-ready:
		d.ready = time.Since(began)
		return d, nil
	case <-d.exited:
		return nil, fmt.Errorf("daemon exited before ready: %v\n%s", d.err, logs)
	case <-time.After(60 * time.Second):
		d.kill()
		return nil, fmt.Errorf("daemon not ready:\n%s", logs)
	}
}

func (d *daemonProc) pid() int { return d.cmd.Process.Pid }

// kill SIGKILLs the daemon (if still running) and reaps it.
func (d *daemonProc) kill() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Kill()
	<-d.exited
}

// signal sends sig and waits for the process to exit.
func (d *daemonProc) stop(tb testing.TB, sig syscall.Signal) error {
	tb.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-d.exited:
		return d.err
	case <-time.After(60 * time.Second):
		d.kill()
		tb.Fatalf("daemon ignored %v:\n%s", sig, d.logs)
		return nil
	}
}

// bin runs the binary as a client and returns what it did.
func bin(tb testing.TB, stdin string, args ...string) result {
	tb.Helper()
	return binEnv(tb, []string{"CMBNODE_HOME="}, stdin, args...)
}

// binEnv is bin with env added to the test's environment.
func binEnv(tb testing.TB, env []string, stdin string, args ...string) result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(tb), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		tb.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}
