//go:build linux

package proc

import (
	"os/exec"
	"syscall"
)

// DieWithParent asks the kernel to SIGKILL cmd's process when this process
// dies (Pdeathsig), and returns true. Call it before cmd.Start.
func DieWithParent(cmd *exec.Cmd) bool {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return true
}
