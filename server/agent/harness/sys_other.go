//go:build !unix

package harness

import (
	"os"
	"syscall"
)

func agentProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) {
	if p != nil {
		_ = p.Kill()
	}
}

func hangUp(int) {}

func killSession(int) {}

func setNonblock(*os.File) {}
