//go:build unix && !linux

package harness

import "syscall"

func withDeathSignal(a *syscall.SysProcAttr, _ syscall.Signal) *syscall.SysProcAttr { return a }
