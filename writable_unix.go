//go:build unix

package idem

import "syscall"

// checkWritable asks access(2) whether this process may write p: it sees
// permissions, a read-only mount and an immutable file or directory, for
// root too.
func checkWritable(p string) error { return syscall.Access(p, wOK) }
