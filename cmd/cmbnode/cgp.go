package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"runtime/debug"
	"sync"

	"cmbnode/node/cgp"
	"cmbnode/node/cgpnode"
	"cmbnode/node/daemon"
	"cmbnode/node/identity"
	"cmbnode/node/ipc"
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

// cgpHooks plugs the CGP engine into the daemon: the socket's query/verify
// and the --cgp-http binding share one engine.
func cgpHooks(h *daemon.Hooks) {
	var (
		once sync.Once
		eng  *cgp.Engine
		err  error
	)
	engine := func(env daemon.Env) (*cgp.Engine, error) {
		once.Do(func() { eng, err = cgpnode.NewEngine(env.Node, version(), env.Logger.With("component", "cgp")) })
		return eng, err
	}
	h.CGP = func(env daemon.Env) (ipc.CGPHandler, error) {
		e, err := engine(env)
		if err != nil {
			return nil, err
		}
		return cgpnode.SocketHandler{Engine: e}, nil
	}
	h.StartCGPHTTP = func(ctx context.Context, env daemon.Env, addr string) (io.Closer, error) {
		e, err := engine(env)
		if err != nil {
			return nil, err
		}
		log := env.Logger.With("component", "cgp-http")
		// cgp_http_token wins; otherwise the token file, minted on first
		// use. Its path is logged, never the token.
		tok := env.Config.CGPHTTPToken
		if tok == "" {
			var created bool
			if tok, created, err = cgpnode.LoadOrCreateToken(env.Home); err != nil {
				return nil, err
			}
			if created {
				log.Info("created the CGP HTTP bearer token", "file", cgpnode.TokenPath(env.Home))
			}
		}
		return cgpnode.StartHTTP(ctx, e, loopbackDefault(addr), tok, log)
	}
}
