//go:build unix

package proc

import (
	"os"
	"syscall"
)

// Kill sends p SIGKILL.
func Kill(p *os.Process) error { return p.Signal(syscall.SIGKILL) }

// KillSelf sends this process SIGKILL. It may return before the signal
// arrives: block after it.
func KillSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }

// Killed reports whether the ended process ps died of SIGKILL.
func Killed(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
