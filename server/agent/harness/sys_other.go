//go:build !unix

package harness

import (
	"os"
	"syscall"
)

func ptyProcAttr() *syscall.SysProcAttr { return nil }

func hangUp(int) {}

func killSession(int) {}

func setNonblock(*os.File) {}
