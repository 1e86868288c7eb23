//go:build !unix

package procs

import (
	"os/exec"
)

func prepare(*exec.Cmd) {}

func startTime(int) (uint64, bool) { return 0, false }
