// Command exitatstart is a release that exits at start: the health gate
// must catch it (it never runs termd's code).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "exitatstart: exiting at once")
	os.Exit(3)
}
