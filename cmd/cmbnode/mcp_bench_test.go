package main

import (
	"context"
	"encoding/json"
	"fmt"
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
// result is decoded. Beside it, the same queries as bare socket recalls
// (ipc.Client) on the same daemon, interleaved query by query so both see
// the same machine: the difference is what the MCP layer costs (the goal:
// p99 within 2 ms of the socket's). The store is the one the CGP
// benchmarks seed (seededBenchHome). Percentiles are over every timed
// round trip, so they do not depend on b.N. mcp-server-cpu-us is the CPU
// time the `cmbnode mcp` process spends per recall (all its threads, from
// /proc), a figure that other load on the machine disturbs less than the
// latencies.
func BenchmarkMCPRecall(b *testing.B) {
	const records, limit, warmup = 10_000, 10, 30
	home := seededBenchHome(b, records)
	d := startBenchDaemon(b, home)
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
		var out struct{ Results []json.RawMessage }
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil {
			b.Fatal(err)
		}
		return len(out.Results), took
	}
	viaSocket := func(q string) int {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		hits, err := sock.Recall(cctx, q, limit)
		if err != nil {
			b.Fatalf("socket recall %q: %v", q, err)
		}
		return len(hits)
	}
	for _, q := range queries[:warmup] {
		viaMCP(q)
		viaSocket(q)
	}
	queries = queries[warmup:]
	var latMCP, latSock []time.Duration
	hits := 0
	cpu0 := processCPU(b, h.cmd.Process.Pid)
	b.ResetTimer()
	for b.Loop() {
		for _, q := range queries {
			n, took := viaMCP(q)
			latMCP = append(latMCP, took)
			t0 := time.Now()
			if m := viaSocket(q); m != n {
				b.Fatalf("recall %q: %d results over MCP, %d over the socket", q, n, m)
			}
			latSock = append(latSock, time.Since(t0))
			hits += n
		}
	}
	b.StopTimer()
	cpu := processCPU(b, h.cmd.Process.Pid) - cpu0
	pct := func(lat []time.Duration, p float64) float64 {
		s := slices.Clone(lat)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1)+0.5)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(latMCP, 0.50), "mcp-p50-ms")
	b.ReportMetric(pct(latMCP, 0.99), "mcp-p99-ms")
	b.ReportMetric(pct(latSock, 0.50), "socket-p50-ms")
	b.ReportMetric(pct(latSock, 0.99), "socket-p99-ms")
	b.ReportMetric(float64(hits)/float64(len(latMCP)), "hits/recall")
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(latMCP)), "mcp-server-cpu-us")
	b.Logf("%d stored, %d recalls each way: MCP p50 %.2f ms p99 %.2f ms; socket p50 %.2f ms p99 %.2f ms; p99 difference %.2f ms; MCP server CPU %v a recall",
		records, len(latMCP), pct(latMCP, 0.5), pct(latMCP, 0.99), pct(latSock, 0.5), pct(latSock, 0.99), pct(latMCP, 0.99)-pct(latSock, 0.99),
		cpu/time.Duration(len(latMCP)))
}

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
