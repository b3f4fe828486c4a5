package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cmbnode/cmbnode/node/ipc"
	"github.com/cmbnode/cmbnode/node/mcpnode"
)

// BenchmarkMCPInProcessRecall is BenchmarkMCPRecall with the MCP server in
// this process (mcpnode.Serve over io.Pipe, the SDK's client on the other
// end), so that -cpuprofile sees the server, the host and the MCP layer
// between them; the daemon is still the built binary. out-B/call is what
// the server writes per recall. The name keeps it out of -bench MCPRecall.
func BenchmarkMCPInProcessRecall(b *testing.B) {
	const records, limit = 10_000, 10
	home := seededBenchHome(b, records)
	d := startBenchDaemon(b, home)
	stopAtCleanup(b, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	var outBytes atomic.Int64
	go func() {
		mcpnode.Serve(ctx, sr, &countW{w: sw, n: &outBytes}, mcpnode.Options{Socket: d.sock, Home: home,
			Logger: slog.New(slog.DiscardHandler)})
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	sock, err := ipc.Dial(ctx, d.sock)
	if err != nil {
		b.Fatal(err)
	}
	defer sock.Close()
	var queries []string
	for _, line := range benchQueryLines(cgpBenchQueries) {
		var q struct {
			Query struct{ Goal string } `json:"query"`
		}
		if err := json.Unmarshal(line, &q); err != nil {
			b.Fatal(err)
		}
		queries = append(queries, q.Query.Goal)
	}
	var latMCP, latSock []time.Duration
	call := func(q string) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "recall", Arguments: map[string]any{"query": q, "limit": limit}})
		if err != nil || res.IsError {
			b.Fatalf("recall %q: %v", q, err)
		}
	}
	for _, q := range queries[:20] {
		call(q)
	}
	b.ResetTimer()
	for b.Loop() {
		for _, q := range queries {
			t0 := time.Now()
			call(q)
			latMCP = append(latMCP, time.Since(t0))

			t0 = time.Now()
			if _, err := sock.Recall(ctx, q, limit); err != nil {
				b.Fatal(err)
			}
			latSock = append(latSock, time.Since(t0))
		}
	}
	b.StopTimer()
	pct := func(lat []time.Duration, p float64) float64 {
		s := slices.Clone(lat)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1)+0.5)].Nanoseconds()) / 1e6
	}
	b.ReportMetric(float64(outBytes.Load())/float64(len(latMCP)+20), "out-B/call")
	b.ReportMetric(pct(latMCP, 0.50), "mcp-p50-ms")
	b.ReportMetric(pct(latMCP, 0.99), "mcp-p99-ms")
	b.ReportMetric(pct(latSock, 0.50), "socket-p50-ms")
	b.ReportMetric(pct(latSock, 0.99), "socket-p99-ms")
}

// countW counts what the server writes.
type countW struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countW) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return c.w.Write(p) }
