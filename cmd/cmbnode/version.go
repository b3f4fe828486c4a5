package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/cmbnode/cmbnode/cmb"
)

// version is the module version the binary was built from: the tag or
// pseudo-version go build stamps from the checkout, "dev" when it has none.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func cmdVersion(e *env, args []string) error {
	fs := newFlags(e, "version", "version [--json]")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]string{"version": version(), "protocolVersion": cmb.ProtocolVersion, "go": runtime.Version()})
	}
	fmt.Fprintf(e.stdout, "cmbnode %s (MMP %s, %s)\n", version(), cmb.ProtocolVersion, runtime.Version())
	return nil
}
