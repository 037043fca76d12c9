//go:build unix

package rusage

import (
	"os"
	"runtime"
	"syscall"
)

// MaxRSSKiB is the peak resident set of an ended child process, in KiB.
func MaxRSSKiB(ps *os.ProcessState) (int64, bool) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return int64(ru.Maxrss) / 1024, true // bytes there
	}
	return int64(ru.Maxrss), true
}
