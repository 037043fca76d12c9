//go:build linux

package holder

import (
	"bytes"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// localScope reads this process's start time, boot id and namespaces. ok
// is false if any of them cannot be read, or if /proc is not this process's
// (mounted from another pid namespace): then no owner of this process can
// be proven dead, and this process proves none dead.
func localScope() (sc scope, ok bool) {
	pid := os.Getpid()
	if link, err := os.Readlink("/proc/self"); err != nil || link != strconv.Itoa(pid) {
		return scope{}, false
	}
	st, err := readProcStat(pid)
	if err != nil {
		return scope{}, false
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return scope{}, false
	}
	sc.start, sc.boot = st.start, strings.TrimSpace(string(boot))
	if sc.pidns, err = nsInode("pid"); err != nil || sc.boot == "" {
		return scope{}, false
	}
	sc.timens, err = nsInode("time")
	if errors.Is(err, os.ErrNotExist) {
		sc.timens = "" // a kernel without time namespaces (before 5.6)
	} else if err != nil {
		return scope{}, false
	}
	return sc, true
}

// nsInode returns the inode number of this process's namespace of the
// kind ("pid", "time"), from the link /proc/self/ns/<kind> -> kind:[inode].
func nsInode(kind string) (string, error) {
	link, err := os.Readlink("/proc/self/ns/" + kind)
	if err != nil {
		return "", err
	}
	ino, ok := strings.CutPrefix(link, kind+":[")
	if ino, ok2 := strings.CutSuffix(ino, "]"); ok && ok2 {
		if _, err := strconv.ParseUint(ino, 10, 64); err == nil {
			return ino, nil
		}
	}
	return "", errors.New("unexpected namespace link " + link)
}

// procStat is what idem reads of /proc/<pid>/stat.
type procStat struct {
	state byte   // R, S, D, Z, X...
	start uint64 // field 22: start time, clock ticks after boot
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses; it
	// ends at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("malformed stat")
	}
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22; f[0] is field 3
	if err != nil {
		return procStat{}, err
	}
	return procStat{state: f[0][0], start: start}, nil
}

// processGone reports whether the process that had pid, started at start,
// in this process's pid namespace, has certainly ended.
func processGone(pid int, start uint64) bool {
	if pid <= 0 || pid > math.MaxInt32 {
		return false // kill(2) would mean a process group, or every process
	}
	exists := func() (yes, sure bool) {
		switch err := syscall.Kill(pid, 0); {
		case err == nil, errors.Is(err, syscall.EPERM): // EPERM: it exists, another user's
			return true, true
		case errors.Is(err, syscall.ESRCH):
			return false, true
		}
		return false, false
	}
	yes, sure := exists()
	if !sure {
		return false
	}
	if !yes {
		return true
	}
	st, err := readProcStat(pid)
	if err != nil {
		// It ended in between, or /proc hides it (hidepid): ask again.
		yes, sure := exists()
		return sure && !yes
	}
	if st.start != start {
		return true // the pid was reused
	}
	if st.state == 'Z' || st.state == 'X' {
		// A zombie: ended, not yet reaped by its parent. Only if all its
		// threads have ended: a group leader that exited before its other
		// threads shows Z while they run on.
		return threads(pid) == 1
	}
	return false
}

// threads returns the Threads: count of /proc/<pid>/status; 0 if it
// cannot be read.
func threads(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}
