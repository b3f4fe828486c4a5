package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The scripts come from the command table and each command's own flags, so
// every command and flag is offered, and bash's script completes.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runCLI(t, "", "completion", sh)
		if r.code != 0 {
			t.Fatalf("completion %s: %+v", sh, r)
		}
		for _, c := range commands() {
			if !strings.Contains(r.stdout, c.name) {
				t.Errorf("completion %s lacks the command %s", sh, c.name)
			}
		}
		for _, f := range []string{"retention", "no-mdns", "since", "key-file", "sender-x25519"} {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("completion %s lacks --%s", sh, f)
			}
		}
		// Each shell parses its script without running it (-n). Read from a
		// file: fish -n -c reports a syntax error but exits 0.
		if path, err := exec.LookPath(sh); err == nil {
			f := filepath.Join(t.TempDir(), "cmbnode."+sh)
			if err := os.WriteFile(f, []byte(r.stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(path, "-n", f).CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("%s rejects its script: %v\n%s", sh, err, out)
			}
		}
	}
	if _, err := exec.LookPath("bash"); err == nil {
		script := runCLI(t, "", "completion", "bash").stdout
		for words, want := range map[string]string{
			"cmbnode daemon --ret": "--retention",
			"cmbnode exp":          "export",
			"cmbnode cmb si":       "sign",
			"cmbnode cmb sign --k": "--key-file",
		} {
			w := strings.Fields(words)
			prog := script + "\nCOMP_WORDS=(" + words + "); COMP_CWORD=" + string(rune('0'+len(w)-1)) + "; _cmbnode; echo \"${COMPREPLY[*]}\""
			out, err := exec.Command("bash", "-c", prog).Output()
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Errorf("bash completes %q to %q, want %q (%v)", words, out, want, err)
			}
		}
	}
	if _, err := exec.LookPath("fish"); err == nil {
		script := runCLI(t, "", "completion", "fish").stdout
		for words, want := range map[string]string{
			"cmbnode exp":          "export",
			"cmbnode daemon --ret": "--retention",
		} {
			out, err := exec.Command("fish", "--no-config", "-c", script+"\ncomplete -C'"+words+"'").Output()
			if got, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\t"); err != nil || got != want {
				t.Errorf("fish completes %q to %q, want %q (%v)", words, out, want, err)
			}
		}
	}
	if r := runCLI(t, "", "completion", "tcsh"); r.code != 2 {
		t.Fatalf("completion tcsh: %+v", r)
	}
}
