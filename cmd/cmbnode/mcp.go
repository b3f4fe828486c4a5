package main

import (
	"os"

	"cmbnode/node/daemon"
	"cmbnode/node/mcpnode"
)

func cmdMCP(e *env, args []string) error {
	flags := newFlags(e, "mcp", "mcp [--home DIR] [--log-level L]   (a host spawns this; stdout carries only MCP messages)")
	home := homeFlag(flags)
	level := flags.String("log-level", "warn", "stderr log level: debug, info, warn or error")
	if rest, err := e.parse(flags, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	switch *level {
	case "debug", "info", "warn", "error":
	default:
		return usagef("--log-level %q: use debug, info, warn or error", *level)
	}
	h, err := resolveHome(*home)
	if err != nil {
		return err
	}
	return mcpnode.Serve(e.ctx, e.stdin, e.stdout, mcpnode.Options{
		Socket: daemon.SocketPath(h), Home: h, Version: version(), Logger: daemon.NewLogger(e.stderr, false, *level),
		// A debugging switch: validate every tool result against its schema.
		CheckOutput: os.Getenv("CMBNODE_MCP_CHECK_OUTPUT") != "",
	})
}
