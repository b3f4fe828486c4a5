package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const crashDirEnv = "CMBNODE_STORE_CRASH_DIR"

// TestCrashChild is the child side of TestCrashRecovery: it writes records as
// fast as it can from several goroutines and prints each key once Put has
// acknowledged it, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestCrashRecovery")
	}
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Println("open-error", err)
		os.Exit(3)
	}
	// Checkpoint every 1 MB of log instead of 32 MB, so that kills also
	// land during checkpoints and right after a log restart.
	s.opts.hooks.walLimit = 1 << 20
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	fmt.Fprintln(out, "ready")
	out.Flush()
	seed := time.Now().UnixNano()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev string
			for i := 0; ; i++ {
				name := fmt.Sprintf("crash-%d-%d-%d", seed, w, i)
				e := mkEntry(name, time.Now().UnixMilli(), "crash test "+name, strings.Repeat("payload ", 40))
				if prev != "" && i%3 == 0 {
					e.Parents, e.Ancestors = []string{prev}, []string{prev}
				}
				if _, _, err := s.Put(context.Background(), e, Meta{}); err != nil {
					fmt.Println("put-error", err)
					os.Exit(4)
				}
				prev = e.Key
				// Only now, after the acknowledgement, may the key be reported.
				mu.Lock()
				fmt.Fprintln(out, "ack", e.Key)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acked []string
	const cycles = 10
	for cycle := range cycles {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Wait until the child has the store open, then kill it at a random
		// moment while writes are in flight.
		select {
		case l := <-lines:
			if l != "ready" {
				cmd.Process.Kill()
				t.Fatalf("cycle %d: child said %q", cycle, l)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("cycle %d: child never became ready", cycle)
		}
		time.AfterFunc(time.Duration(20+rng.IntN(400))*time.Millisecond, func() {
			cmd.Process.Signal(syscall.SIGKILL)
		})
		n := 0
		for l := range lines {
			key, ok := strings.CutPrefix(l, "ack ")
			if !ok {
				t.Fatalf("cycle %d: child said %q", cycle, l)
			}
			acked = append(acked, key)
			n++
		}
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("cycle %d: child ended without being killed: %v", cycle, cmd.ProcessState)
		}

		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("cycle %d: reopen after SIGKILL: %v", cycle, err)
		}
		ctx := context.Background()
		for _, k := range acked {
			if ok, err := s.Has(ctx, k); err != nil || !ok {
				s.Close()
				t.Fatalf("cycle %d: acknowledged %s lost after SIGKILL (err %v)", cycle, k, err)
			}
		}
		if err := s.Check(ctx); err != nil {
			s.Close()
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		t.Logf("cycle %d: %d acknowledged this cycle, %d in total, %d stored", cycle, n, len(acked), s.Count())
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(acked) == 0 {
		t.Fatal("the child never acknowledged a write")
	}
}
