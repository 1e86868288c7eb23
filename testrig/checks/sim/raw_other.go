//go:build !linux

package sim

import "os"

// makeRaw does nothing here: go.bug.st/serial sets raw mode when the check
// opens the port, before anything is written.
func makeRaw(*os.File) {}
