//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package idem

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fsFull reports whether the file system of dir has no room for one more
// page or no free inode, with a detail that says what is left.
func fsFull(dir string) (bool, string) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, ""
	}
	bsize := uint64(st.Bsize)
	avail := uint64(st.Bavail) * bsize
	if os.Geteuid() == 0 {
		avail = uint64(st.Bfree) * bsize // root may use the reserved blocks
	}
	const room = 64 << 10 // a commit needs a few pages beside the -wal file's growth
	switch {
	case avail < room:
		return true, fmt.Sprintf("the file system of %s has %d bytes free", dir, avail)
	case st.Files > 0 && st.Ffree == 0:
		return true, fmt.Sprintf("the file system of %s has no free inode", dir)
	}
	return false, ""
}

// fileLimit describes this process's limit of open files.
func fileLimit() string {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return "the limit of open files is reached"
	}
	n := "?"
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		n = strconv.Itoa(len(ents))
	}
	return fmt.Sprintf("%s files open, the limit (ulimit -n) is %d", n, rl.Cur)
}
