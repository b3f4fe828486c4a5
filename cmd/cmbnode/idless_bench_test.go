package main

import (
	"bufio"
	"encoding/json"
	"math/rand"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/internal/benchtext"
)

// BenchmarkIdlessRemembers is one connection sending standard remembers
// without ids as fast as the daemon takes them (a writer and a reader,
// as the reference runtime's clients do): the rate one such agent gets.
func BenchmarkIdlessRemembers(b *testing.B) {
	const n = 5000
	d := startDaemon(b, b.TempDir())
	conn := dialRaw(b, d.sock)
	r := rand.New(rand.NewSource(2))
	vocab := benchtext.Vocab(r, 4096)
	z := rand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	stamp := time.Now().UnixNano()
	lines := make([][]byte, n)
	for i := range lines {
		var m map[string]any
		if err := json.Unmarshal(standardRemember(i, stamp, vocab, z), &m); err != nil {
			b.Fatal(err)
		}
		delete(m, "id")
		line, _ := json.Marshal(m)
		lines[i] = append(line, '\n')
	}
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(conn, 64<<10)
		for range n {
			if _, err := br.ReadSlice('\n'); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	t0 := time.Now()
	for _, l := range lines {
		if _, err := conn.Write(l); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(n/time.Since(t0).Seconds(), "remembers/s")
}
