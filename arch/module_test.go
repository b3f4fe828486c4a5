package arch

import (
	"os"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// The module path is one `go install PATH/cmd/cmbnode@latest` accepts: a
// path whose first element is a domain (a bare "cmbnode" is refused as
// "malformed module path ... missing dot in first path element").
func TestModulePathInstallable(t *testing.T) {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax("go.mod", b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := module.CheckPath(f.Module.Mod.Path); err != nil {
		t.Fatalf("module path: %v", err)
	}
	if err := module.CheckPath("cmbnode"); err == nil {
		t.Fatal("CheckPath accepts a bare name: this test would not catch the old path")
	}
}
