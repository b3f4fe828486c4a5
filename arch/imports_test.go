// Package arch holds the test that keeps the package boundaries of
// docs/architecture.md from drifting.
package arch

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Imports    []string // direct imports
	Deps       []string // everything it depends on, transitively
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", "github.com/cmbnode/cmbnode/...")
	cmd.Dir = ".."
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// matches reports whether import path imp falls under pattern: an exact
// path, or a prefix ending in "/..." (the prefix itself included).
func matches(imp, pattern string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return imp == base || strings.HasPrefix(imp, base+"/")
	}
	return imp == pattern
}

const (
	badger = "github.com/dgraph-io/badger/..."
	libp2p = "github.com/libp2p/..."
)

// The rules of docs/architecture.md, "Who may import whom". A package's
// direct imports are checked; "deps" rules check everything it pulls in.
var rules = []struct {
	pkg       string
	deps      bool // check transitive dependencies, not only direct imports
	forbidden []string
	why       string
}{
	{"github.com/cmbnode/cmbnode/cmb", true, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node/...", "github.com/cmbnode/cmbnode/lineage/...", badger, libp2p}, "the record format stands alone"},
	{"github.com/cmbnode/cmbnode/e2e", true, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node/...", badger, libp2p}, "sealing stands alone"},
	{"github.com/cmbnode/cmbnode/group", true, []string{"github.com/cmbnode/cmbnode/cmb", "github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node/...", badger, libp2p}, "group names stand alone"},
	{"github.com/cmbnode/cmbnode/node/groupkey", true, []string{"github.com/cmbnode/cmbnode/cmb", "github.com/cmbnode/cmbnode/e2e", "github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/config", "github.com/cmbnode/cmbnode/lineage/...", badger, libp2p}, "group secrets stand alone: bytes in, bytes out"},
	{"github.com/cmbnode/cmbnode/node/secretfile", true, []string{"github.com/cmbnode/cmbnode/..."}, "secret files stand alone"},
	{"github.com/cmbnode/cmbnode/internal/opt", true, []string{"github.com/cmbnode/cmbnode/..."}, "the options rule stands alone"},
	{"github.com/cmbnode/cmbnode/internal/benchtext", true, []string{"github.com/cmbnode/cmbnode/..."}, "the benchmarks' texts stand alone"},
	{"github.com/cmbnode/cmbnode/internal/logx", true, []string{"github.com/cmbnode/cmbnode/...", badger, libp2p}, "the log handlers stand alone"},
	{"github.com/cmbnode/cmbnode/lineage/walk", true, []string{"github.com/cmbnode/cmbnode/store", badger, libp2p}, "the walks serve any graph, store or CGP backend"},
	{"github.com/cmbnode/cmbnode/lineage", false, []string{badger, libp2p, "github.com/cmbnode/cmbnode/node/..."}, "lineage reads through store's API, never badger"},
	{"github.com/cmbnode/cmbnode/node/svaf", true, []string{"github.com/cmbnode/cmbnode/..."}, "the SVAF evaluator is arithmetic over vectors"},
	{"github.com/cmbnode/cmbnode/node/embed", true, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/lineage/...", badger, libp2p}, "encoders know no store, node or network library"},
	{"github.com/cmbnode/cmbnode/store", true, []string{"github.com/cmbnode/cmbnode/node/...", "github.com/cmbnode/cmbnode/lineage/...", libp2p}, "the store knows no node, mesh or protocol adapter"},
	{"github.com/cmbnode/cmbnode/node", false, []string{"github.com/cmbnode/cmbnode/node/cgp/...", "github.com/cmbnode/cmbnode/node/cgpnode", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/ipc", "github.com/cmbnode/cmbnode/node/daemon", "github.com/cmbnode/cmbnode/node/metrics", "github.com/cmbnode/cmbnode/node/config", libp2p, badger}, "the core imports no adapter"},
	{"github.com/cmbnode/cmbnode/node/mesh", false, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/lineage/...", "github.com/cmbnode/cmbnode/node/cgp/...", "github.com/cmbnode/cmbnode/node/cgpnode", "github.com/cmbnode/cmbnode/node/ipc", "github.com/cmbnode/cmbnode/node/daemon", "github.com/cmbnode/cmbnode/node/metrics", badger}, "the mesh goes through the node, and metrics read the mesh"},
	{"github.com/cmbnode/cmbnode/node/ipc", false, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/cgp/...", "github.com/cmbnode/cmbnode/node/cgpnode", "github.com/cmbnode/cmbnode/node/daemon", libp2p, badger}, "the socket goes through the node"},
	{"github.com/cmbnode/cmbnode/node/cgp", true, []string{"github.com/cmbnode/cmbnode/node", "github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/ipc", badger, libp2p}, "the CGP engine works on its Backend only"},
	{"github.com/cmbnode/cmbnode/node/cgpnode", false, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/daemon", badger, libp2p}, "the CGP adapter goes through the node"},
	{"github.com/cmbnode/cmbnode/node/mcpnode", false, []string{"github.com/cmbnode/cmbnode/store", "github.com/cmbnode/cmbnode/lineage/...", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/daemon", "github.com/cmbnode/cmbnode/node/cgp/...", "github.com/cmbnode/cmbnode/node/cgpnode", badger, libp2p}, "the MCP server talks to the daemon socket only"},
	{"github.com/cmbnode/cmbnode/node/mcpnode", true, []string{"github.com/cmbnode/cmbnode/node/mesh", libp2p}, "the MCP server never opens the network itself"},
	{"github.com/cmbnode/cmbnode/node/metrics", false, []string{"github.com/cmbnode/cmbnode/store", badger}, "metrics read the node and the mesh"},
	{"github.com/cmbnode/cmbnode/cmd/cmbnode", false, []string{"github.com/cmbnode/cmbnode/lineage/...", "github.com/cmbnode/cmbnode/node/mesh", "github.com/cmbnode/cmbnode/node/metrics", "github.com/cmbnode/cmbnode/node/cgp", badger, libp2p}, "cmd parses, calls node/daemon or a client, and formats"},
}

func TestImportBoundaries(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range rules {
		p, ok := pkgs[r.pkg]
		if !ok {
			t.Errorf("rule for %s names no package: update the rules with the layout", r.pkg)
			continue
		}
		list := p.Imports
		if r.deps {
			list = p.Deps
		}
		for _, imp := range list {
			for _, f := range r.forbidden {
				if matches(imp, f) {
					t.Errorf("%s imports %s (via %s): %s", r.pkg, imp, map[bool]string{true: "dependencies", false: "a direct import"}[r.deps], r.why)
				}
			}
		}
	}
}

// Only the composition root (node/daemon) starts the mesh, the socket
// server and the metrics endpoint.
func TestOneCompositionRoot(t *testing.T) {
	roots := map[string][]string{
		"github.com/cmbnode/cmbnode/node/mesh":    {"github.com/cmbnode/cmbnode/node/daemon", "github.com/cmbnode/cmbnode/node/metrics"},
		"github.com/cmbnode/cmbnode/node/metrics": {"github.com/cmbnode/cmbnode/node/daemon"},
		"github.com/cmbnode/cmbnode/node/daemon":  {"github.com/cmbnode/cmbnode/cmd/cmbnode"},
	}
	for path, p := range listPackages(t) {
		for _, imp := range p.Imports {
			allowed, ruled := roots[imp]
			if !ruled {
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || a == path
			}
			if !ok {
				t.Errorf("%s imports %s; only %v may", path, imp, allowed)
			}
		}
	}
}
