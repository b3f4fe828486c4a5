package main

import (
	"errors"
	"io/fs"
	"runtime/debug"

	"cmbnode/node/cgpnode"
	"cmbnode/node/daemon"
	"cmbnode/node/identity"
)

// version is the module version the binary was built from ("dev" in a checkout).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func cmdCGP(e *env, args []string) error {
	flags := newFlags(e, "cgp", "cgp [--home DIR] [--log-level L]   (a host spawns this; stdout carries only CGP envelopes)")
	home := homeFlag(flags)
	level := flags.String("log-level", "warn", "stderr log level: debug, info, warn or error")
	if rest, err := parse(flags, args); err != nil {
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
	// The identity only supplies the attester key for the handshake; without
	// one the shim still answers, and queries report the missing daemon.
	id, err := identity.Load(h)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("identity unreadable; the handshake will publish no attester key", "err", err)
		}
		id = nil
	}
	return cgpnode.ServeStdio(e.ctx, e.stdin, e.stdout, id, daemon.SocketPath(h), version(), log)
}
