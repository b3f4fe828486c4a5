package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func recallKeys(t *testing.T, home, query string) []string {
	t.Helper()
	r := bin(t, "", "recall", "--json", "--limit", "50", "--home", home, query)
	var res struct {
		Results []struct{ Key string } `json:"results"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil {
		t.Fatalf("recall: %+v", r)
	}
	keys := make([]string, len(res.Results))
	for i, h := range res.Results {
		keys[i] = h.Key
	}
	return keys
}

// Export from one node, import into a fresh one: the same records, byte for
// byte, and the same recall results; a second import adds nothing; a
// tampered line is refused while the rest are stored.
func TestExportImportRoundTrip(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	startDaemon(t, a)
	var keys []string
	parent := ""
	for i := range 12 {
		args := []string{"remember", "--home", a, "--focus", fmt.Sprintf("release step %d", i), "--intent", "ship the parser"}
		if parent != "" && i%3 != 0 {
			args = append(args, "--parent", parent)
		}
		r := bin(t, "", args...)
		if r.code != 0 {
			t.Fatalf("remember: %+v", r)
		}
		parent = strings.TrimSpace(r.stdout)
		keys = append(keys, parent)
	}
	exp := bin(t, "", "export", "--home", a)
	lines := strings.Split(strings.TrimSpace(exp.stdout), "\n")
	if exp.code != 0 || len(lines) != len(keys) || !strings.Contains(exp.stderr, "12 records") {
		t.Fatalf("export: %d lines, %+v", len(lines), exp)
	}
	var first struct {
		CMB       json.RawMessage `json:"cmb"`
		PublicKey string          `json:"publicKey"`
	}
	if json.Unmarshal([]byte(lines[0]), &first) != nil || first.PublicKey == "" || len(first.CMB) == 0 {
		t.Fatalf("an export line lacks the record or its author's key: %s", lines[0])
	}

	startDaemon(t, b)
	imp := bin(t, exp.stdout, "import", "--home", b)
	if imp.code != 0 || !strings.Contains(imp.stdout, "imported 12, already held 0") {
		t.Fatalf("import: %+v", imp)
	}
	for _, k := range keys {
		ga, gb := bin(t, "", "get", "--json", "--home", a, k), bin(t, "", "get", "--json", "--home", b, k)
		var ra, rb struct {
			CMB json.RawMessage `json:"cmb"`
		}
		if gb.code != 0 || json.Unmarshal([]byte(ga.stdout), &ra) != nil || json.Unmarshal([]byte(gb.stdout), &rb) != nil || string(ra.CMB) != string(rb.CMB) {
			t.Fatalf("%s differs after the round trip:\n%s\n%s", k, ga.stdout, gb.stdout)
		}
	}
	if ka, kb := recallKeys(t, a, "release parser"), recallKeys(t, b, "release parser"); len(ka) != 12 || !slices.Equal(ka, kb) {
		t.Fatalf("recall differs after the round trip:\n%v\n%v", ka, kb)
	}
	lin := bin(t, "", "lineage", "--json", "--home", b, keys[2])
	if lin.code != 0 || !strings.Contains(lin.stdout, keys[1]) {
		t.Fatalf("lineage after import: %+v", lin)
	}

	// Idempotent.
	if imp := bin(t, exp.stdout, "import", "--home", b); imp.code != 0 || !strings.Contains(imp.stdout, "imported 0, already held 12") {
		t.Fatalf("second import: %+v", imp)
	}

	// Verified, never trusted: a changed field fails its address; garbage is
	// named by line; the rest of the file is stored.
	c := t.TempDir()
	startDaemon(t, c)
	tampered := strings.Replace(lines[3], "release step 3", "release step 99", 1)
	in := lines[0] + "\n" + tampered + "\nnot json\n" + lines[1] + "\n"
	imp = bin(t, in, "import", "--home", c)
	if imp.code != 1 || !strings.Contains(imp.stdout, "imported 2, already held 0, directed to another node 0, rejected 2") ||
		!strings.Contains(imp.stdout, "line 2: "+keys[3]) || !strings.Contains(imp.stdout, "line 3: not a JSON object") {
		t.Fatalf("import of a tampered file: %+v", imp)
	}
	if r := bin(t, "", "get", "--home", c, keys[3]); r.code != 1 {
		t.Fatalf("the tampered record was stored: %+v", r)
	}
}

func TestExportFilters(t *testing.T) {
	home := t.TempDir()
	startDaemon(t, home)
	if r := bin(t, "", "remember", "--home", home, "--focus", "one"); r.code != 0 {
		t.Fatal(r)
	}
	var st struct{ NodeID string }
	json.Unmarshal([]byte(bin(t, "", "status", "--json", "--home", home).stdout), &st)
	for _, c := range []struct {
		args []string
		n    int
	}{
		{[]string{"--since", "1h"}, 1},
		{[]string{"--since", "2999-01-01"}, 0},
		{[]string{"--author", st.NodeID}, 1},
		{[]string{"--author", "01a22b06-79d8-7d64-9a71-0e01f73a03b5"}, 0},
	} {
		r := bin(t, "", append([]string{"export", "--home", home}, c.args...)...)
		if got := strings.Count(r.stdout, "\n"); r.code != 0 || got != c.n {
			t.Errorf("export %v: %d records, want %d: %+v", c.args, got, c.n, r)
		}
	}
	if r := bin(t, "", "export", "--home", home, "--since", "yesterday"); r.code != 2 || !strings.Contains(r.stderr, "--since") {
		t.Fatalf("bad --since: %+v", r)
	}
}

// check runs store.Check through the running daemon, offline when none
// runs, and says when there is nothing to check.
func TestCheck(t *testing.T) {
	home := t.TempDir()
	d := startDaemon(t, home)
	bin(t, "", "remember", "--home", home, "--focus", "checked")
	r := bin(t, "", "check", "--home", home)
	if r.code != 0 || !strings.Contains(r.stdout, "store ok: 1 records") || !strings.Contains(r.stdout, "running daemon") {
		t.Fatalf("check through the daemon: %+v", r)
	}
	d.kill()
	r = bin(t, "", "check", "--home", home)
	if r.code != 0 || !strings.Contains(r.stdout, "store ok: 1 records") || !strings.Contains(r.stdout, "no daemon was running") {
		t.Fatalf("offline check: %+v", r)
	}
	r = bin(t, "", "check", "--json", "--home", home)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"ok":true,"records":1,"problems":[]}` {
		t.Fatalf("check --json: %+v", r)
	}
	r = bin(t, "", "check", "--home", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "no store") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("check of an empty home: %+v", r)
	}
}
