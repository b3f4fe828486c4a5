package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"

	"github.com/cmbnode/cmbnode/node/daemon"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// ifGiven is v when the flag named name was given on the command line, else nil.
func ifGiven[T any](given map[string]bool, name string, v *T) *T {
	if given[name] {
		return v
	}
	return nil
}

func cmdDaemon(e *env, args []string) error {
	fs := newFlags(e, "daemon", "daemon [--home DIR] [--name N] [--group G] [--public] [--listen MADDR]… [--bootstrap MADDR]… [--relay MADDR]… [--relay-service] [--reachability R] [--nat-port-map] [--no-mdns] [--cgp-http ADDR] [--metrics ADDR] [--retention D] [--log-json] [--log-level L] [--cpuprofile FILE] [--trace FILE]")
	home := homeFlag(fs)
	// Only flags given on the command line override the file.
	var o daemon.Overrides
	grp := fs.String("group", "", "mesh group to join (overrides config.toml; default \"default\")")
	public := fs.Bool("public", false, "make the group name-only, for plain MMP nodes: anyone who knows the name can join and read (overrides config.toml)")
	fs.Var((*listFlag)(&o.Listen), "listen", "libp2p listen multiaddr (repeatable; overrides config.toml)")
	fs.Var((*listFlag)(&o.Bootstrap), "bootstrap", "peer to dial, a full multiaddr with /p2p/ (repeatable; overrides config.toml)")
	fs.Var((*listFlag)(&o.Relays), "relay", "a member relaying for the group, a full multiaddr with /p2p/ (repeatable; overrides config.toml)")
	relayService := fs.Bool("relay-service", false, "relay for the group's members (on a member with a public address)")
	reach := fs.String("reachability", "", "auto, public or private (default auto: AutoNAT decides)")
	natPortMap := fs.Bool("nat-port-map", false, "ask the router for a port mapping (UPnP / NAT-PMP)")
	fs.BoolVar(&o.NoMDNS, "no-mdns", false, "turn LAN discovery off")
	cgpHTTP := fs.String("cgp-http", "", "serve Context Graph Protocol over HTTP at ADDR, e.g. 127.0.0.1:7474")
	metrics := fs.String("metrics", "", "serve Prometheus metrics at ADDR, e.g. 127.0.0.1:9464")
	retention := fs.Duration("retention", 0, "purge records older than this, e.g. 720h (0 keeps everything)")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info)")
	name := fs.String("name", "", "name for the identity created on first run (default: from the hostname)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the daemon's run to FILE (for `go tool pprof`), finished when it stops")
	traceFile := fs.String("trace", "", "write a Go execution trace of the daemon's run to FILE (for `go tool trace`: what wakes it and when), finished when it stops")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	o.Group = ifGiven(given, "group", grp)
	o.Public = ifGiven(given, "public", public)
	o.RelayService = ifGiven(given, "relay-service", relayService)
	o.Reachability = ifGiven(given, "reachability", reach)
	o.NATPortMap = ifGiven(given, "nat-port-map", natPortMap)
	o.CGPHTTP = ifGiven(given, "cgp-http", cgpHTTP)
	o.Metrics = ifGiven(given, "metrics", metrics)
	o.Retention = ifGiven(given, "retention", retention)
	o.LogJSON = ifGiven(given, "log-json", logJSON)
	o.LogLevel = ifGiven(given, "log-level", logLevel)
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
	if *traceFile != "" {
		stop, err := startTrace(*traceFile)
		if err != nil {
			return err
		}
		defer stop()
	}
	return withFix(daemon.Run(e.ctx, daemon.Options{
		Home: h, Overrides: o, Name: *name, Stderr: e.stderr, Version: version(),
		// This process is the daemon's alone: its GC settings are too.
		IdleGC: true,
	}))
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	return record("--cpuprofile", path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace writes an execution trace of the process to path until stop
// is called.
func startTrace(path string) (stop func(), err error) {
	return record("--trace", path, trace.Start, trace.Stop)
}

// record runs start on a new file at path, which flag named; stop ends it.
func record(flag, path string, start func(io.Writer) error, end func()) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return func() { end(); f.Close() }, nil
}
