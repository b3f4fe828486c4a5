package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/node/config"
)

// The README's Quick start, run as a person would in two shells: `make run`
// in one (the daemon on the default home, no --home), then `bin/cmbnode
// status`, `remember` and `recall` in the other with no flags at all.
func TestQuickStartTwoShells(t *testing.T) {
	userHome := t.TempDir()
	env := []string{"HOME=" + userHome, "CMBNODE_HOME="}
	nodeHome := filepath.Join(userHome, ".cmbnode")
	// What `make run ARGS="--no-mdns --listen …"` runs (the Makefile's recipe
	// is checked by TestMakeRunUsesTheDefaultHome).
	d, err := spawnDaemonEnv(t, nodeHome, env, "daemon", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nodeHome, "identity.json")); err != nil {
		t.Fatalf("the daemon did not use ~/.cmbnode: %v", err)
	}

	r := binEnv(t, env, "", "status")
	if r.code != 0 || !strings.Contains(r.stdout, filepath.Join(nodeHome, "daemon.sock")) {
		t.Fatalf("status in the second shell: %+v", r)
	}
	r = binEnv(t, env, "", "remember", "--focus", "release plan drafted", "--intent", "ship friday")
	key := strings.TrimSpace(r.stdout)
	if r.code != 0 || cmb.SchemeOf(key) != cmb.SchemeV1 {
		t.Fatalf("remember: %+v", r)
	}
	r = binEnv(t, env, "", "recall", "release")
	if r.code != 0 || !strings.Contains(r.stdout, key) {
		t.Fatalf("recall: %+v", r)
	}

	// Once it is stopped, the hint names the command that starts this
	// node again, on this home: not a new identity somewhere else.
	d.kill()
	r = binEnv(t, env, "", "status")
	want := "`cmbnode daemon --home " + nodeHome + "`"
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "this node's daemon") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("status with the daemon stopped: want one line naming %s, got %+v", want, r)
	}
}

// A home with no node: the hint says that starting a daemon there creates
// one, and how to reach a daemon running elsewhere instead.
func TestNoDaemonHintOnAnEmptyHome(t *testing.T) {
	home := filepath.Join(t.TempDir(), "empty")
	r := bin(t, "", "status", "--home", home)
	if r.code != 1 || !strings.Contains(r.stderr, "holds no node yet") || !strings.Contains(r.stderr, "pass that --home") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("status on an empty home: %+v", r)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Fatalf("a client created the home: %v", err)
	}
}

// `make run` starts the daemon with no --home, so it uses the default home
// every client uses.
func TestMakeRunUsesTheDefaultHome(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "run").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	var recipe string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, " daemon") {
			recipe = line
		}
	}
	if recipe == "" || strings.Contains(recipe, "--home") || !strings.HasPrefix(strings.TrimSpace(recipe), "bin/cmbnode daemon") {
		t.Fatalf("make run should run `bin/cmbnode daemon` on the default home, runs %q", recipe)
	}
}

func TestFirstRunWritesTheCommentedConfig(t *testing.T) {
	home := t.TempDir()
	d := startDaemon(t, home)
	d.kill()
	b, err := os.ReadFile(config.Path(home))
	if err != nil {
		t.Fatalf("first run wrote no config.toml: %v", err)
	}
	if string(b) != config.Render(config.Default()) {
		t.Fatalf("first run's config.toml is not the commented defaults:\n%s", b)
	}
	if _, err := config.Load(home); err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	// An existing file is never overwritten.
	mine := []byte("# mine\ngroup = \"alpha\"\n")
	if err := os.WriteFile(config.Path(home), mine, 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, home).kill()
	if b, _ := os.ReadFile(config.Path(home)); string(b) != string(mine) {
		t.Fatalf("the daemon rewrote an existing config.toml:\n%s", b)
	}
}

func TestHelpAndUsage(t *testing.T) {
	// An explicit --help: the usage once, on stdout, with --flag spelling.
	r := runCLI(t, "", "daemon", "--help")
	if r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "Usage:") != 1 {
		t.Fatalf("daemon --help: %+v", r)
	}
	for _, want := range []string{"--name N", "--retention D", "--home DIR", "--listen MADDR"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("daemon --help lacks %q:\n%s", want, r.stdout)
		}
	}
	if regexp.MustCompile(`(?m)^\s+-[a-z]`).MatchString(r.stdout) {
		t.Errorf("daemon --help spells a flag with one dash:\n%s", r.stdout)
	}
	for _, args := range [][]string{{"status", "--help"}, {"recall", "-h"}, {"cmb", "sign", "--help"}} {
		if r := runCLI(t, "", args...); r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "Usage:") != 1 {
			t.Errorf("%v: want the usage once on stdout, got %+v", args, r)
		}
	}
	// A bad flag: one line on stderr naming it as --flag, nothing on stdout, exit 2.
	r = runCLI(t, "", "status", "--bogus")
	if r.code != 2 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--bogus") || !strings.Contains(r.stderr, "cmbnode status --help") {
		t.Fatalf("status --bogus: %+v", r)
	}
	r = runCLI(t, "", "recall", "--limit", "x", "q")
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "--limit") {
		t.Fatalf("recall --limit x: %+v", r)
	}
	// No command at all is a usage error: the usage on stderr.
	if r := runCLI(t, ""); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "Usage:") {
		t.Fatalf("no command: %+v", r)
	}
	if r := runCLI(t, "", "cmb"); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "Usage:") {
		t.Fatalf("cmb with no tool: %+v", r)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := bin(t, "", args...)
		if r.code != 0 || !regexp.MustCompile(`^cmbnode \S+ \(MMP `+regexp.QuoteMeta(cmb.ProtocolVersion)+`, go`).MatchString(r.stdout) {
			t.Errorf("%v: %+v", args, r)
		}
	}
	r := bin(t, "", "version", "--json")
	var v map[string]string
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || v["version"] == "" || v["protocolVersion"] != cmb.ProtocolVersion {
		t.Fatalf("version --json: %+v", r)
	}
}

// Flags are checked before the home is touched, and a bad one is a usage
// error (exit 2) in one sentence.
func TestDaemonRefusesBadFlagsBeforeTouchingTheHome(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "garbage"},
		{"--bootstrap", "/ip4/127.0.0.1/tcp/4001"},
		{"--metrics", "nonsense"},
		{"--log-level", "loud"},
		{"--group", "Not A Group!"},
	} {
		home := filepath.Join(t.TempDir(), "home")
		r := bin(t, "", append([]string{"daemon", "--home", home}, args...)...)
		if r.code != 2 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("daemon %v: want exit 2 and one line naming %s, got %+v", args, args[0], r)
		}
		if _, err := os.Stat(home); !os.IsNotExist(err) {
			t.Errorf("daemon %v touched the home: %v", args, err)
		}
	}
}

// Each error is one sentence: what failed, then the fix, said once.
func TestErrorsAreSaidOnce(t *testing.T) {
	home := t.TempDir()
	r := bin(t, `{"fields":{"focus":"x"}}`, "cmb", "sign", "--home", home)
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "cmbnode cmb sign: no identity at") ||
		strings.Count(r.stderr, "identity") != 2 || strings.Count(r.stderr, "cmbnode init") != 1 {
		t.Fatalf("cmb sign without an identity: %+v", r)
	}
	in := `{"type":"handshake","protocol_version":"contextgraph/1.0"}` + "\n" +
		`{"type":"query","id":"q1","query":{"goal":"x","max_frames":1,"max_tokens":100}}` + "\n"
	r = bin(t, in, "cgp", "--home", home)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("cgp with no daemon: %+v", r)
	}
	var e struct{ Code, Message string }
	if json.Unmarshal([]byte(lines[1]), &e) != nil || e.Code != "unavailable" || strings.Count(e.Message, "daemon.sock") != 1 || strings.Count(e.Message, "running") != 1 {
		t.Fatalf("cgp with no daemon says it more than once: %s", lines[1])
	}
}

// status shows the daemon's build; peers shows each peer's MMP version and
// cmbnode build from its handshake.
func TestVersionInStatusAndPeers(t *testing.T) {
	var v struct{ Version string }
	if r := bin(t, "", "version", "--json"); json.Unmarshal([]byte(r.stdout), &v) != nil || v.Version == "" {
		t.Fatalf("version --json: %+v", r)
	}
	dir := t.TempDir()
	_, b := memberPair(t, filepath.Join(dir, "a"), filepath.Join(dir, "b"), "a", "b", "alpha")
	cb := dialDaemon(t, b)
	waitFor(t, "the daemons handshake", 30*time.Second, func() bool { return status(t, cb).Peers == 1 })

	r := bin(t, "", "status", "--home", b.home)
	if want := "version    " + v.Version + " (MMP " + cmb.ProtocolVersion + ")"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Fatalf("status lacks %q: %+v", want, r)
	}
	r = bin(t, "", "peers", "--json", "--home", b.home)
	var p struct {
		Peers []struct{ Version, Build string } `json:"peers"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &p) != nil || len(p.Peers) != 1 || p.Peers[0].Version != cmb.ProtocolVersion || p.Peers[0].Build != v.Version {
		t.Fatalf("peers --json: %+v", r)
	}
	r = bin(t, "", "peers", "--home", b.home)
	if want := v.Version + " (MMP " + cmb.ProtocolVersion + ")"; r.code != 0 || !strings.Contains(r.stdout, "version") || !strings.Contains(r.stdout, want) {
		t.Fatalf("peers lacks %q: %+v", want, r)
	}
}

// Under systemd (Type=notify) the daemon says READY=1 on $NOTIFY_SOCKET once
// its socket serves, and STOPPING=1 when it stops; SIGHUP stops it cleanly.
func TestSystemdNotifyAndSIGHUP(t *testing.T) {
	dir := t.TempDir()
	notify := filepath.Join(dir, "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	home := filepath.Join(dir, "home")
	d, err := spawnDaemonEnv(t, home, []string{"CMBNODE_HOME=", "NOTIFY_SOCKET=" + notify}, append([]string{"daemon", "--home", home}, testNetArgs(nil)...)...)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		buf := make([]byte, 4096)
		ln.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, d.logs)
		}
		return string(buf[:n])
	}
	if msg := read(); !strings.HasPrefix(msg, "READY=1\n") || !strings.Contains(msg, d.sock) {
		t.Fatalf("first notification: %q", msg)
	}
	if err := d.stop(t, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP: exit %v\n%s", err, d.logs)
	}
	if msg := read(); msg != "STOPPING=1" {
		t.Fatalf("second notification: %q", msg)
	}
	if _, err := os.Stat(d.sock); !os.IsNotExist(err) {
		t.Fatalf("socket left after SIGHUP: %v", err)
	}
	if !strings.Contains(d.logs.String(), "msg=stopped") {
		t.Fatalf("no clean stop after SIGHUP:\n%s", d.logs)
	}
}

// The shipped unit is a notify-type user service that restarts on failure
// and names the home it runs.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../../contrib/systemd/cmbnode.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"\nType=notify\n", "\nRestart=on-failure\n", "daemon --home %h/.cmbnode\n", "systemctl --user", "WantedBy=default.target"} {
		if !strings.Contains(unit, want) {
			t.Errorf("cmbnode.service lacks %q", want)
		}
	}
}

// docs/cgp.md's session example works as printed, against a running daemon.
func TestCGPDocSessionExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cgp.md")
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, `{"type":"handshake",`) || strings.HasPrefix(line, `{"type":"query",`) {
			in = append(in, line)
		}
	}
	if len(in) != 2 {
		t.Fatalf("docs/cgp.md shows %d handshake/query lines, want 2", len(in))
	}
	home := t.TempDir()
	startDaemon(t, home)
	bin(t, "", "remember", "--home", home, "--focus", "we decided retries back off exponentially")
	r := bin(t, strings.Join(in, "\n")+"\n", "cgp", "--home", home)
	out := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(out) != 2 || !strings.HasPrefix(out[0], `{"type":"handshake_ack"`) || !strings.HasPrefix(out[1], `{"type":"frames","id":"q1"`) || !strings.Contains(out[1], "retries back off") {
		t.Fatalf("the documented session: %+v", r)
	}
}
