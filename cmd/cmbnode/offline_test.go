package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/e2e"
	"github.com/cmbnode/cmbnode/node/identity"
)

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

const vectorFieldsJSON = `"fields":{"focus":"testing conformance vectors","issue":"none","intent":"verify implementations agree","motivation":"interop","commitment":"exact bytes","perspective":"generator","mood":{"text":"neutral","valence":0,"arousal":0}}`

func seedFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "seed")
	os.WriteFile(p, []byte("QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI\n"), 0o600)
	return p
}

func TestCMBKeyAndSignReproduceVectors(t *testing.T) {
	r := runCLI(t, `{`+vectorFieldsJSON+`}`, "cmb", "key")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "cmb1-567e99d3f443ee0e0867ac2c7b8e0de9d2331daaf42cc8364bcc34dfc423b1cf" {
		t.Fatalf("cmb key: %+v", r)
	}
	// Empty fields count as neutral (vector case 3).
	r = runCLI(t, `{"fields":{"focus":"testing conformance vectors","issue":"","intent":"verify implementations agree","motivation":"","commitment":"exact bytes","perspective":"generator","mood":{"text":"neutral"}}}`, "cmb", "key")
	if strings.TrimSpace(r.stdout) != "cmb1-ce71bbfae4440402f39ecfe0c71f5f558e5c67ac309f943eee1cc4ebe6324f3e" {
		t.Fatalf("cmb key, empty fields: %+v", r)
	}
	in := `{"createdBy":"vector-author","createdAt":1751000000000,"group":"conformance-group","to":"recipient-node-id",` + vectorFieldsJSON + `}`
	r = runCLI(t, in, "cmb", "sign", "--key-file", seedFile(t))
	if r.code != 0 {
		t.Fatalf("cmb sign: %+v", r)
	}
	signed, err := cmb.Decode([]byte(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	const want = "6Y8HBbhjWriABzg0RwMkopnUwWmChTEbavXzA29FErSXLx5k9OE9yrNai7QlG6Mk1vV_8QsRpd0oN-2ltC7SBA" // cmb-sig-v1 directed
	if signed.Sig != want {
		t.Fatalf("sig = %s, want %s", signed.Sig, want)
	}
	const pub = "IVL40Zt5HSRFMkLhXy6rbLfP-ntqXtMAl5YOBpiB2xI"
	r = runCLI(t, r.stdout, "cmb", "verify", "--pubkey", pub, "--group", "conformance-group", "--node", "recipient-node-id")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "accepted cmb1-567e") {
		t.Fatalf("verify own signature: %+v", r)
	}
	tampered := strings.Replace(string(signed.Encode()), "exact bytes", "exact bytez", 1)
	for _, c := range []struct {
		name, in string
		args     []string
		reason   string
	}{
		{"tampered", tampered, []string{"--pubkey", pub}, "address-mismatch"},
		{"wrong group", string(signed.Encode()), []string{"--pubkey", pub, "--group", "other"}, "wrong-group"},
		{"wrong recipient", string(signed.Encode()), []string{"--pubkey", pub, "--node", "someone-else"}, "wrong-recipient"},
		{"wrong key", string(signed.Encode()), []string{"--pubkey", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "bad-signature"},
	} {
		r := runCLI(t, c.in, append([]string{"cmb", "verify"}, c.args...)...)
		if r.code != 1 || !strings.Contains(r.stdout, c.reason) {
			t.Errorf("%s: code %d stdout %q, want exit 1 naming %s", c.name, r.code, r.stdout, c.reason)
		}
	}
	if r := runCLI(t, "not json", "cmb", "verify", "--pubkey", pub); r.code != 2 {
		t.Fatalf("bad input: %+v", r)
	}
	if r := runCLI(t, in, "cmb", "verify"); r.code != 2 || !strings.Contains(r.stderr, "--pubkey") {
		t.Fatalf("missing --pubkey: %+v", r)
	}
}

func TestInitSignWithHomeSealOpen(t *testing.T) {
	home := t.TempDir() + "/node"
	r := runCLI(t, "", "init", "--home", home, "--name", "alice", "--group", "alpha", "--json")
	if r.code != 0 {
		t.Fatalf("init: %+v", r)
	}
	var info map[string]string
	json.Unmarshal([]byte(r.stdout), &info)
	if info["group"] != "alpha" || info["name"] != "alice" {
		t.Fatalf("init output: %s", r.stdout)
	}
	if r := runCLI(t, "", "init", "--home", home); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("second init: %+v", r)
	}
	if r := runCLI(t, "", "init", "--home", t.TempDir(), "--group", "Bad Group"); r.code != 2 {
		t.Fatalf("bad group: %+v", r)
	}
	id, err := identity.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	recipient, _ := e2e.GenerateKey(nil)
	r = runCLI(t, `{"group":"alpha","fields":{"focus":"meet at noon"}}`, "cmb", "sign", "--home", home)
	if r.code != 0 {
		t.Fatalf("sign with home: %+v", r)
	}
	signed, _ := cmb.Decode([]byte(r.stdout))
	if signed.CreatedBy != id.NodeID || signed.Fields[cmb.Issue].Text != "neutral" {
		t.Fatalf("sign did not fill author/neutral: %s", r.stdout)
	}
	sealed := runCLI(t, r.stdout, "cmb", "seal", "--home", home, "--to-x25519", e2e.EncodePublicKeyDER(recipient.PublicKey()))
	if sealed.code != 0 || strings.Contains(sealed.stdout, "meet at noon") {
		t.Fatalf("seal: %+v", sealed)
	}
	open := runCLI(t, sealed.stdout, "cmb", "open", "--x25519-key", e2e.EncodePrivateKeyRaw(recipient), "--sender-x25519", id.E2EPublicKeyDER())
	if open.code != 0 || strings.TrimSpace(open.stdout) != strings.TrimSpace(r.stdout) {
		t.Fatalf("open: %+v", open)
	}
	other, _ := e2e.GenerateKey(nil)
	bad := runCLI(t, sealed.stdout, "cmb", "open", "--x25519-key", e2e.EncodePrivateKeyRaw(other), "--sender-x25519", id.E2EPublicKeyDER())
	if bad.code != 1 || !strings.Contains(bad.stdout, "rejected") {
		t.Fatalf("open with wrong key: %+v", bad)
	}
	v := runCLI(t, sealed.stdout, "cmb", "verify", "--pubkey", id.PublicKeyB64(), "--x25519-key", e2e.EncodePrivateKeyPKCS8(recipient), "--sender-x25519", id.E2EPublicKeyDER())
	if v.code != 0 {
		t.Fatalf("verify sealed: %+v", v)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"cmb"}, {"cmb", "nope"}, {"init", "--bogus"}, {"cmb", "seal"}} {
		if r := runCLI(t, "", args...); r.code != 2 || r.stderr == "" {
			t.Errorf("%v: %+v, want exit 2 with a message", args, r)
		}
	}
	if r := runCLI(t, "", "--help"); r.code != 0 || !strings.Contains(r.stdout, "daemon") {
		t.Fatalf("--help: %+v", r)
	}
}

// TestBinary drives the built binary once, so main's wiring is covered too.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cmbnode")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "cmb", "key")
	cmd.Stdin = strings.NewReader(`{` + vectorFieldsJSON + `}`)
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "cmb1-567e99d3f443ee0e0867ac2c7b8e0de9d2331daaf42cc8364bcc34dfc423b1cf" {
		t.Fatalf("binary cmb key: %q %v", out, err)
	}
	err = exec.Command(bin, "nope").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("unknown command exit: %v", err)
	}
}
