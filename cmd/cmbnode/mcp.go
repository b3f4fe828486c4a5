package main

import (
	"os"
	"runtime/debug"

	"github.com/cmbnode/cmbnode/node/daemon"
	"github.com/cmbnode/cmbnode/node/mcpnode"
)

func cmdMCP(e *env, args []string) error {
	h, log, err := shimArgs(e, "mcp", "MCP messages", args)
	if err != nil {
		return err
	}
	// The server relays: its live heap is a few MiB (one request's reply
	// and the schemas), so at the default GOGC it collects every few
	// calls, and a quarter of its CPU went to the collector. A larger
	// growth factor trades some MiB of memory for that CPU and for the
	// pauses that lengthen a host's tail latency.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(mcpGCPercent)
	}
	return mcpnode.Serve(e.ctx, e.stdin, e.stdout, mcpnode.Options{
		Socket: daemon.SocketPath(h), Home: h, Version: version(), Logger: log,
		// A debugging switch: validate every tool result against its schema.
		CheckOutput: os.Getenv("CMBNODE_MCP_CHECK_OUTPUT") != "",
	})
}

// mcpGCPercent is the MCP server's GOGC (the Go default is 100); a
// GOGC set in the environment wins.
const mcpGCPercent = 400
