//go:build windows

package idem

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// tryLockExclusive takes an exclusive lock on all of f without waiting
// (LockFileEx with LOCKFILE_FAIL_IMMEDIATELY); ok is false if another open
// file holds one.
func tryLockExclusive(f *os.File) (ok bool, err error) {
	err = lockFileEx(f, windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return false, nil
	}
	return err == nil, err
}

// lockExclusive takes an exclusive lock on all of f, waiting while another
// open file holds one.
func lockExclusive(f *os.File) error {
	return lockFileEx(f, windows.LOCKFILE_EXCLUSIVE_LOCK)
}

// unlockFile releases the lock lockFileEx took on f.
func unlockFile(f *os.File) error {
	const allBytes = ^uint32(0)
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, allBytes, allBytes, new(windows.Overlapped))
}

// lockFileEx locks every byte f may ever have. os.OpenFile's handles are
// synchronous, so LockFileEx returns once the lock is taken (or refused); it
// still needs an OVERLAPPED, whose zero offset is where the range starts.
// The lock is released when f is closed, or when the process ends.
func lockFileEx(f *os.File, flags uint32) error {
	const allBytes = ^uint32(0)
	return windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, allBytes, allBytes, new(windows.Overlapped))
}
