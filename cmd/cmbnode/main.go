// Command cmbnode is the mesh memory node: the daemon, a client of its local
// socket, and offline tools for single records. Everything here is flags,
// output and exit codes; the logic lives in the packages it calls.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes of the CLI contract.
const (
	exitOK       = 0
	exitFailure  = 1 // the user caused it, or a rejection
	exitUsage    = 2
	maxStdinSize = 4 << 20 // one record: the 1 MiB frame cap with room for ciphertext
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// env is what one invocation reads and writes; tests substitute it.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

func commands() []command {
	return []command{
		{"init", "create the identity and a commented config", cmdInit},
		{"daemon", "run the node", cmdDaemon},
		{"group", "create, rotate or show this home's private group", cmdGroup},
		{"invite", "print a one-line invite to this node's private group", cmdInvite},
		{"join", "join a private group with an invite", cmdJoin},
		{"status", "show the running node", cmdStatus},
		{"peers", "list handshaken peers", cmdPeers},
		{"remember", "build, sign, store and publish a CMB", cmdRemember},
		{"recall", "ranked search over stored CMBs", cmdRecall},
		{"get", "show one stored CMB", cmdGet},
		{"lineage", "show a CMB's ancestors and descendants", cmdLineage},
		{"cgp", "serve Context Graph Protocol over stdio", cmdCGP},
		{"cmb", "offline tools on one CMB read from stdin (key, sign, verify, seal, open)", cmdCMB},
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return report(e, c.name, c.run(e, args[1:]))
		}
	}
	fmt.Fprintf(stderr, "cmbnode: unknown command %q; run 'cmbnode --help' for the list\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "cmbnode: a mesh memory node for AI agents (MMP 1.1 over libp2p, CGP provider)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: cmbnode <command> [flags]   (every command takes --home DIR)")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'cmbnode <command> --help' for a command's flags.")
}

// usageError is a mistake in how the command was called: exit 2.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// rejected is a verdict, not a failure of the tool: exit 1, message on stdout.
type rejected struct{ msg string }

func (r *rejected) Error() string { return r.msg }

func report(e *env, name string, err error) int {
	var u *usageError
	var r *rejected
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &u):
		fmt.Fprintf(e.stderr, "cmbnode %s: %s\n", name, u.msg)
		return exitUsage
	case errors.As(err, &r):
		fmt.Fprintln(e.stdout, r.msg)
		return exitFailure
	}
	fmt.Fprintf(e.stderr, "cmbnode %s: %v\n", name, err)
	return exitFailure
}

// newFlags makes a flag set whose parse errors become usage errors and whose
// --help prints to stdout.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: cmbnode %s\n\nFlags:\n", synopsis)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse runs fs.Parse, mapping errors onto the CLI contract, and allows flags
// after positional arguments (cmbnode recall QUERY --limit 3).
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, flag.ErrHelp
			}
			return nil, usagef("%v (see --help)", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// homeFlag registers --home on fs.
func homeFlag(fs *flag.FlagSet) *string {
	return fs.String("home", "", "node home directory (default $CMBNODE_HOME, else ~/.cmbnode)")
}
