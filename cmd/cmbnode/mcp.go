package main

import (
	"os"

	"cmbnode/node/daemon"
	"cmbnode/node/mcpnode"
)

func cmdMCP(e *env, args []string) error {
	h, log, err := shimArgs(e, "mcp", "MCP messages", args)
	if err != nil {
		return err
	}
	return mcpnode.Serve(e.ctx, e.stdin, e.stdout, mcpnode.Options{
		Socket: daemon.SocketPath(h), Home: h, Version: version(), Logger: log,
		// A debugging switch: validate every tool result against its schema.
		CheckOutput: os.Getenv("CMBNODE_MCP_CHECK_OUTPUT") != "",
	})
}
