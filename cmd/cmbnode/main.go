// Command cmbnode is the mesh memory node: daemon, socket client and offline tools.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cmbnode: under construction")
	os.Exit(2)
}
