// Command swapper installs releases a and b over exe by turns, forever
// (until the test kills it): each copied to exe.new and synced, then
// update.Install. It prints "ready" before the first. Usage: swapper
// EXE A B. (TestInstallKilledMidSwap; a small program starts quicker
// than the race-built test binary.)
package main

import (
	"fmt"
	"os"

	"termlink/device/update"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Println("usage: swapper EXE A B")
		os.Exit(2)
	}
	exe, a, b := os.Args[1], os.Args[2], os.Args[3]
	fmt.Println("ready")
	for i := 0; ; i++ {
		src := a
		if i%2 == 1 {
			src = b
		}
		if err := update.CopyFile(src, exe+update.StagedSuffix); err != nil {
			fmt.Println("copy:", err)
			os.Exit(1)
		}
		if err := update.Install(exe+update.StagedSuffix, exe); err != nil {
			fmt.Println("install:", err)
			os.Exit(1)
		}
	}
}
