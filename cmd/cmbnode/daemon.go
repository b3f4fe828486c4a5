package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"cmbnode/group"
	"cmbnode/node/daemon"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func cmdDaemon(e *env, args []string) error {
	fs := newFlags(e, "daemon", "daemon [--home DIR] [--name N] [--group G] [--public] [--listen MADDR]… [--bootstrap MADDR]… [--relay MADDR]… [--relay-service] [--reachability R] [--nat-port-map] [--no-mdns] [--cgp-http ADDR] [--metrics ADDR] [--retention D] [--log-json] [--log-level L] [--cpuprofile FILE]")
	home := homeFlag(fs)
	grp := fs.String("group", "", "mesh group to join (overrides config.toml; default \"default\")")
	public := fs.Bool("public", false, "make the group name-only, for plain MMP nodes: anyone who knows the name can join and read (overrides config.toml)")
	var listen, bootstrap, relays listFlag
	fs.Var(&listen, "listen", "libp2p listen multiaddr (repeatable; overrides config.toml)")
	fs.Var(&bootstrap, "bootstrap", "peer to dial, a full multiaddr with /p2p/ (repeatable; overrides config.toml)")
	fs.Var(&relays, "relay", "a member relaying for the group, a full multiaddr with /p2p/ (repeatable; overrides config.toml)")
	relayService := fs.Bool("relay-service", false, "relay for the group's members (on a member with a public address)")
	reach := fs.String("reachability", "", "auto, public or private (default auto: AutoNAT decides)")
	natPortMap := fs.Bool("nat-port-map", false, "ask the router for a port mapping (UPnP / NAT-PMP)")
	noMDNS := fs.Bool("no-mdns", false, "turn LAN discovery off")
	cgpHTTP := fs.String("cgp-http", "", "serve Context Graph Protocol over HTTP at ADDR, e.g. 127.0.0.1:7474")
	metrics := fs.String("metrics", "", "serve Prometheus metrics at ADDR, e.g. 127.0.0.1:9464")
	retention := fs.Duration("retention", 0, "purge records older than this, e.g. 720h (0 keeps everything)")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info)")
	name := fs.String("name", "", "name for the identity created on first run (default: from the hostname)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the daemon's run to FILE (for `go tool pprof`), finished when it stops")
	if rest, err := e.parse(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	// Only flags given on the command line override the file.
	var o daemon.Overrides
	var badFlag error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "group":
			if err := group.Validate(*grp); err != nil {
				badFlag = usagef("--group: %v", err)
			}
			o.Group = grp
		case "public":
			o.Public = public
		case "listen":
			o.Listen = listen
		case "bootstrap":
			o.Bootstrap = bootstrap
		case "relay":
			o.Relays = relays
		case "relay-service":
			o.RelayService = relayService
		case "reachability":
			o.Reachability = reach
		case "nat-port-map":
			o.NATPortMap = natPortMap
		case "no-mdns":
			o.NoMDNS = *noMDNS
		case "cgp-http":
			o.CGPHTTP = cgpHTTP
		case "metrics":
			o.Metrics = metrics
		case "retention":
			if *retention < 0 {
				badFlag = usagef("--retention must not be negative")
			}
			r := *retention
			o.Retention = &r
		case "log-json":
			o.LogJSON = logJSON
		case "log-level":
			switch *logLevel {
			case "debug", "info", "warn", "error":
			default:
				badFlag = usagef("--log-level %q: use debug, info, warn or error", *logLevel)
			}
			o.LogLevel = logLevel
		}
	})
	if badFlag != nil {
		return badFlag
	}
	if err := o.Validate(); err != nil {
		return usagef("%v", err)
	}
	h, err := resolveHome(*home)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	return withFix(daemon.Run(e.ctx, daemon.Options{
		Home: h, Overrides: o, Name: *name, Stderr: e.stderr, Version: version(),
	}))
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
