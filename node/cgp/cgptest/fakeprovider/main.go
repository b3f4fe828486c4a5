// Command fakeprovider is the red-team CGP provider (spec/cgp.md §9.2) as a
// standalone binary, for running the harness by hand or against other
// hosts: `fakeprovider MODE` serves the seeded corpus over stdio, honestly
// (MODE "honest") or misbehaving in one named way (see
// cgptest.RedTeamModes). The package tests re-exec their own binary
// instead, so nothing needs building for `go test`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cmbnode/cmbnode/node/cgp/cgptest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cgptest.RunProvider(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
