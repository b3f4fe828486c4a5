package main

import (
	"log/slog"

	"github.com/cmbnode/cmbnode/node/cgpnode"
	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/daemon"
)

// shimArgs parses what a stdio server a host spawns takes (`cgp`, `mcp`):
// --home and --log-level, no arguments. It returns the resolved home and a
// stderr logger; stdout belongs to the protocol.
func shimArgs(e *env, name, protocol string, args []string) (home string, log *slog.Logger, err error) {
	flags := newFlags(e, name, name+" [--home DIR] [--log-level L]   (a host spawns this; stdout carries only "+protocol+")")
	homeDir := homeFlag(flags)
	level := flags.String("log-level", "warn", "stderr log level: debug, info, warn or error")
	if err := e.parseNone(flags, args); err != nil {
		return "", nil, err
	}
	if err := config.CheckLogLevel(*level); err != nil {
		return "", nil, usagef("--log-level %v", err)
	}
	if home, err = resolveHome(*homeDir); err != nil {
		return "", nil, err
	}
	return home, daemon.NewLogger(e.stderr, false, *level), nil
}

func cmdCGP(e *env, args []string) error {
	h, log, err := shimArgs(e, "cgp", "CGP envelopes", args)
	if err != nil {
		return err
	}
	return cgpnode.ServeStdio(e.ctx, e.stdin, e.stdout, h, daemon.SocketPath(h), version(), log)
}
