//go:build unix

package guard

import "golang.org/x/sys/unix"

// freeBytes is the space free to unprivileged writers on the filesystem
// holding p.
func freeBytes(p string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:unconvert // the field types differ by OS
}
