package harness

import "syscall"

func withDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) *syscall.SysProcAttr {
	a.Pdeathsig = sig
	return a
}
