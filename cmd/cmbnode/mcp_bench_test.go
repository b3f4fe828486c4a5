package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/node/ipc"
)

// BenchmarkMCPRecall is the round trip of the MCP `recall` tool at 10,000
// stored CMBs, end to end: the SDK's client sends tools/call to the built
// `cmbnode mcp` over its stdio, which calls the daemon socket's recall,
// names the authors and renders the result; the timer stops when the
// result is decoded. Beside it, the same query as a bare socket recall
// (ipc.Client) on the same daemon, the two paired query by query and
// taken in alternating order (MCP first, then socket first), so that both
// distributions see the same load and neither always runs on caches the
// other warmed: the difference is what the MCP layer costs (the goal: p99
// within 2 ms of the socket's). One operation is mcpRecallPairs pairs
// (the 300 queries cycled), enough that a p99 rests on 20 samples and
// does not move with b.N; percentiles are over every timed round trip.
// The store is the one the CGP benchmarks seed (seededBenchHome).
//
// CPU per recall, which other load on the machine disturbs less than the
// latencies, from /proc for every thread: mcp-server-cpu-us is the
// `cmbnode mcp` process's; daemon-cpu-us the daemon's per recall of
// either kind (both paths pay it); host-cpu-us this process's per pair
// (the SDK client's decoding of the MCP result and ipc.Client's of the
// socket's, plus the bench's own bookkeeping). daemon-alloc-B/recall and
// daemon-allocs/recall are what the daemon allocates per recall, from the
// Go counters on its metrics endpoint. CMBNODE_BENCH_PROFILE=DIR
// has the daemon write its CPU profile to DIR/mcp-recall-daemon.pprof
// (BenchmarkMCPInProcessRecall profiles the MCP layer).
func BenchmarkMCPRecall(b *testing.B) {
	const records, limit, warmup = 10_000, 10, 30
	home := seededBenchHome(b, records)
	metricsAddr := loopbackAddr(b)
	args := []string{"--metrics", metricsAddr}
	if dir := os.Getenv("CMBNODE_BENCH_PROFILE"); dir != "" {
		args = append(args, "--cpuprofile", filepath.Join(dir, "mcp-recall-daemon.pprof"))
	}
	d := startBenchDaemon(b, home, args...)
	stopAtCleanup(b, d)
	h := startMCP(b, home, "")
	sock, err := ipc.Dial(context.Background(), d.sock)
	if err != nil {
		b.Fatal(err)
	}
	defer sock.Close()
	var queries []string
	for _, line := range benchQueryLines(cgpBenchQueries + warmup) {
		var q struct {
			Query struct{ Goal string } `json:"query"`
		}
		if err := json.Unmarshal(line, &q); err != nil {
			b.Fatal(err)
		}
		queries = append(queries, q.Query.Goal)
	}
	ctx := context.Background()
	// viaMCP times the call until the SDK has decoded the result; counting
	// the results (to compare with the socket's) is outside the time.
	viaMCP := func(q string) (int, time.Duration) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		t0 := time.Now()
		res, err := h.cs.CallTool(cctx, &mcp.CallToolParams{Name: "recall", Arguments: map[string]any{"query": q, "limit": limit}})
		took := time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("recall %q: %v %s", q, err, resultText(res))
		}
		// The SDK's client decodes structuredContent into generic values.
		sc, _ := res.StructuredContent.(map[string]any)
		rs, ok := sc["results"].([]any)
		if !ok {
			b.Fatalf("recall %q: structuredContent without results: %v", q, res.StructuredContent)
		}
		return len(rs), took
	}
	viaSocket := func(q string) (int, time.Duration) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		t0 := time.Now()
		hits, err := sock.Recall(cctx, q, limit)
		took := time.Since(t0)
		if err != nil {
			b.Fatalf("socket recall %q: %v", q, err)
		}
		return len(hits), took
	}
	for _, q := range queries[:warmup] {
		viaMCP(q)
		viaSocket(q)
	}
	queries = queries[warmup:]
	latMCP := make([]time.Duration, 0, mcpRecallPairs)
	latSock := make([]time.Duration, 0, mcpRecallPairs)
	hits := 0
	self := os.Getpid()
	srv0, daemon0, host0 := processCPU(b, h.cmd.Process.Pid), processCPU(b, d.cmd.Process.Pid), processCPU(b, self)
	alloc0 := goAllocs(b, metricsAddr)
	b.ResetTimer()
	for b.Loop() {
		for i := range mcpRecallPairs {
			q := queries[i%len(queries)]
			var n, m int
			var tm, ts time.Duration
			if i%2 == 0 {
				n, tm = viaMCP(q)
				m, ts = viaSocket(q)
			} else {
				m, ts = viaSocket(q)
				n, tm = viaMCP(q)
			}
			if m != n {
				b.Fatalf("recall %q: %d results over MCP, %d over the socket", q, n, m)
			}
			latMCP, latSock = append(latMCP, tm), append(latSock, ts)
			hits += n
		}
	}
	b.StopTimer()
	srv := processCPU(b, h.cmd.Process.Pid) - srv0
	daemon := processCPU(b, d.cmd.Process.Pid) - daemon0
	host := processCPU(b, self) - host0
	alloc := goAllocs(b, metricsAddr)
	pct := func(lat []time.Duration, p float64) float64 {
		s := slices.Clone(lat)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1)+0.5)].Microseconds()) / 1000
	}
	pairs := float64(len(latMCP))
	perRecall := func(cpu time.Duration, n float64) float64 { return float64(cpu.Microseconds()) / n }
	mp50, mp99, sp50, sp99 := pct(latMCP, 0.50), pct(latMCP, 0.99), pct(latSock, 0.50), pct(latSock, 0.99)
	b.ReportMetric(mp50, "mcp-p50-ms")
	b.ReportMetric(mp99, "mcp-p99-ms")
	b.ReportMetric(sp50, "socket-p50-ms")
	b.ReportMetric(sp99, "socket-p99-ms")
	b.ReportMetric(mp99-sp99, "p99-diff-ms")
	b.ReportMetric(float64(hits)/pairs, "hits/recall")
	b.ReportMetric(perRecall(srv, pairs), "mcp-server-cpu-us")
	b.ReportMetric(perRecall(daemon, 2*pairs), "daemon-cpu-us")
	b.ReportMetric(perRecall(host, pairs), "host-cpu-us")
	b.ReportMetric((alloc.bytes-alloc0.bytes)/(2*pairs), "daemon-alloc-B/recall")
	b.ReportMetric((alloc.objects-alloc0.objects)/(2*pairs), "daemon-allocs/recall")
	b.Logf("%d stored, %d recalls each way: MCP p50 %.2f ms p99 %.2f ms; socket p50 %.2f ms p99 %.2f ms; "+
		"p50 difference %.2f ms, p99 difference %.2f ms; CPU per recall: MCP server %.0f µs, daemon %.0f µs, host %.0f µs a pair",
		records, len(latMCP), mp50, mp99, sp50, sp99, mp50-sp50, mp99-sp99,
		perRecall(srv, pairs), perRecall(daemon, 2*pairs), perRecall(host, pairs))
}

// goAllocs reads the bytes and objects a daemon has allocated so far from
// its metrics endpoint (the Go collector's counters).
func goAllocs(b *testing.B, addr string) (n struct{ bytes, objects float64 }) {
	b.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("daemon metrics: %v", err)
	}
	defer res.Body.Close()
	page, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		b.Fatalf("daemon metrics: %v", err)
	}
	for line := range strings.Lines(string(page)) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case !ok:
		case name == "go_memstats_alloc_bytes_total":
			n.bytes, err = strconv.ParseFloat(v, 64)
		case name == "go_memstats_mallocs_total":
			n.objects, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			b.Fatalf("daemon metrics: %q: %v", line, err)
		}
	}
	if n.bytes == 0 || n.objects == 0 {
		b.Fatal("daemon metrics: no go_memstats_alloc_bytes_total or go_memstats_mallocs_total")
	}
	return n
}

// mcpRecallPairs is how many MCP and socket recalls BenchmarkMCPRecall
// times per operation: 2,000 each, so a p99 is the 20th worst of each.
const mcpRecallPairs = 2000

// processCPU is the CPU time pid's threads have run, from the scheduler's
// per-thread accounting (/proc/PID/task/TID/schedstat, in nanoseconds).
// Threads that exit take their time with them; Go's rarely do.
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		b.Skipf("no per-thread CPU accounting here: %v", err)
	}
	var ns int64
	for _, t := range tasks {
		raw, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(raw))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			ns += n
		}
	}
	return time.Duration(ns)
}
