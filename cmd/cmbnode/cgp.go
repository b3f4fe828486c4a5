package main

import (
	"cmbnode/node/cgpnode"
	"cmbnode/node/daemon"
)

func cmdCGP(e *env, args []string) error {
	flags := newFlags(e, "cgp", "cgp [--home DIR] [--log-level L]   (a host spawns this; stdout carries only CGP envelopes)")
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
	log := daemon.NewLogger(e.stderr, false, *level)
	h, err := resolveHome(*home)
	if err != nil {
		return err
	}
	return cgpnode.ServeStdio(e.ctx, e.stdin, e.stdout, h, daemon.SocketPath(h), version(), log)
}
