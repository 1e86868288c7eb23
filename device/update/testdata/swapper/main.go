// Command swapper installs releases a and b over exe by turns, forever
// (until the test kills it): each copied to exe.new and synced, then
// update.Install. It prints "ready" before the first. Usage: swapper
// EXE A B. (TestInstallKilledMidSwap; a small program starts quicker
// than the race-built test binary.)
package main

import (
	"errors"
	"fmt"
	"io"
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
		if err := copyFile(src, exe+update.StagedSuffix); err != nil {
			fmt.Println("copy:", err)
			os.Exit(1)
		}
		if err := update.Install(exe+update.StagedSuffix, exe); err != nil {
			fmt.Println("install:", err)
			os.Exit(1)
		}
	}
}

// copyFile copies src to dst (0755) and fsyncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}
