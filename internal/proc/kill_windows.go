//go:build windows

package proc

import (
	"os"

	"golang.org/x/sys/windows"
)

// Kill ends p with TerminateProcess and exit code KilledExitCode.
func Kill(p *os.Process) error {
	var err error
	if herr := p.WithHandle(func(h uintptr) {
		err = windows.TerminateProcess(windows.Handle(h), KilledExitCode)
	}); herr != nil {
		return herr
	}
	return err
}

// KillSelf ends this process with TerminateProcess and exit code
// KilledExitCode. It may return before the process is gone: block after
// it.
func KillSelf() { _ = windows.TerminateProcess(windows.CurrentProcess(), KilledExitCode) }

// Killed reports whether the ended process ps exited with KilledExitCode.
func Killed(ps *os.ProcessState) bool { return ps.ExitCode() == KilledExitCode }
