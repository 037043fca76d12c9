package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to send the command SIGTERM if idem
// dies first (SIGKILL, OOM killer): without a heartbeat its lease runs out,
// and a later run may start the period again, so the old command must not
// linger.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}
