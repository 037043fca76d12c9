// Package hostsys holds the system calls whose use differs by system in the
// idem command: the signal a command it starts gets if idem dies first,
// the lock of a command's file, and what doctor reads of a directory's
// filesystem. On linux they are made; elsewhere they are not (no signal, no
// lock, [ErrUnsupported]). The command's other packages build alike on
// every system, so the test command compiles this package alone for
// windows and darwin (scripts/test.sh's cross_targets), not the command's
// dependencies (the stores' and brokers' clients).
package hostsys

import "errors"

// ErrUnsupported is what Statfs and Writable return on a system where they
// cannot tell.
var ErrUnsupported = errors.ErrUnsupported

// FS is what Statfs reads of a directory's filesystem.
type FS struct {
	Type      uint32 // statfs(2)'s f_type (linux/magic.h)
	Free      uint64 // bytes this user may still write (root: the reserved blocks too)
	Files     uint64 // inodes in all (0: the filesystem does not count them)
	FreeFiles uint64 // free inodes
}
