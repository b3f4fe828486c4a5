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
	"regexp"
	"strings"
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
	// SIGHUP stops the daemon as cleanly as SIGTERM (socket removed, store
	// closed): a service manager restarts it to re-read config.toml.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// env is what one invocation reads and writes; tests substitute it.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// synopses are the usage lines of the flag sets newFlags made, printed
	// by parse for --help.
	synopses map[*flag.FlagSet]string
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
		{"trust", "pin a member's key for its nodeId, ending a conflict over it", cmdTrust},
		{"connect", "dial a peer now and wait for its handshake and membership proof", cmdConnect},
		{"remember", "build, sign, store and publish a CMB", cmdRemember},
		{"recall", "ranked search over stored CMBs", cmdRecall},
		{"get", "show one stored CMB", cmdGet},
		{"lineage", "show a CMB's ancestors and descendants", cmdLineage},
		{"list", "list the newest CMBs (no query needed)", cmdList},
		{"forget", "forget a CMB on this node only (a local tombstone)", cmdForget},
		{"mcp", "serve Model Context Protocol over stdio (for LLM hosts)", cmdMCP},
		{"export", "write the held records, signed and with their authors' keys, as NDJSON", cmdExport},
		{"import", "verify and store the records of an export read from stdin", cmdImport},
		{"check", "check the store's consistency (through the daemon, or offline)", cmdCheck},
		{"cgp", "serve Context Graph Protocol over stdio", cmdCGP},
		{"cmb", "offline tools on one CMB read from stdin (key, sign, verify, seal, open)", cmdCMB},
		{"version", "print the version (also: cmbnode --version)", cmdVersion},
		{"completion", "print a shell completion script: bash, zsh or fish", cmdCompletion},
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, synopses: map[*flag.FlagSet]string{}}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return exitOK
	case "--version", "-version":
		return report(e, "version", cmdVersion(e, args[1:]))
	}
	for _, c := range commands() {
		if c.name == args[0] {
			name := c.name
			if c.name == "cmb" && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
				name += " " + args[1] // errors name the tool: "cmbnode cmb sign: …"
			}
			return report(e, name, c.run(e, args[1:]))
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
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'cmbnode <command> --help' for a command's flags.")
}

// subcommand runs the one of tools that args[0] names (a kind: "tool"),
// listed for a person as list. --help prints help to stdout; no name at all
// prints it to noneW and is a usage error.
func subcommand(e *env, args []string, noneW io.Writer, kind, list, help string, tools map[string]func(*env, []string) error) error {
	if len(args) == 0 {
		fmt.Fprintln(noneW, help)
		return usagef("name a %s: %s", kind, list)
	}
	if args[0] == "--help" || args[0] == "-h" {
		fmt.Fprintln(e.stdout, help)
		return nil
	}
	tool, ok := tools[args[0]]
	if !ok {
		return usagef("unknown %s %q: use %s", kind, args[0], list)
	}
	return tool(e, args[1:])
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
		if r.msg != "" { // "" when the command already printed its verdict
			fmt.Fprintln(e.stdout, r.msg)
		}
		return exitFailure
	}
	fmt.Fprintf(e.stderr, "cmbnode %s: %v\n", name, err)
	return exitFailure
}

// newFlags makes a flag set whose parse errors become usage errors (one
// line on stderr) and whose --help prints the usage, once, to stdout.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // parse prints it, and only for --help
	e.synopses[fs] = synopsis
	return fs
}

// printUsage writes a command's synopsis and flags, spelled --flag.
func printUsage(w io.Writer, fs *flag.FlagSet, synopsis string) {
	fmt.Fprintf(w, "Usage: cmbnode %s\n", synopsis)
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintf(w, "\nFlags:\n")
			first = false
		}
		arg, text := flag.UnquoteUsage(f)
		// The synopsis names the value ("--home DIR"); the flag package
		// only knows its type.
		if m := regexp.MustCompile(`--` + regexp.QuoteMeta(f.Name) + ` ([A-Z][A-Z0-9]*)`).FindStringSubmatch(synopsis); m != nil {
			arg = m[1]
		}
		name := "--" + f.Name
		if arg != "" {
			name += " " + arg
		}
		fmt.Fprintf(w, "  %-22s %s\n", name, text)
	})
}

// singleDash finds a flag named with one dash in the flag package's errors.
var singleDash = regexp.MustCompile(`(^|[ :])-([A-Za-z][\w-]*)`)

// parse runs fs.Parse, mapping errors onto the CLI contract, and allows flags
// after positional arguments (cmbnode recall QUERY --limit 3).
func (e *env) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(e.stdout, fs, e.synopses[fs])
				return nil, flag.ErrHelp
			}
			msg := singleDash.ReplaceAllString(err.Error(), "$1--$2")
			return nil, usagef("%s; run 'cmbnode %s --help' for its flags", msg, fs.Name())
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
