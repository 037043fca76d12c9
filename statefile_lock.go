package idem

import (
	"errors"
	"fmt"
	"os"
)

// The state file's locks are whole-file exclusive locks on sidecar files
// (see [StateFile]): flock(2) on Unix (statefile_lock_unix.go), LockFileEx
// on Windows (statefile_lock_windows.go). Either way the lock belongs to the
// open file, so two opens of one lock file exclude each other even within
// one process, and the operating system releases it when the file is closed
// or its process dies.

// tryLock takes job's lock without waiting; ok is false if another holder
// (process or goroutine) has it.
func (s *StateFile) tryLock(job string) (f *os.File, ok bool, err error) {
	p := s.lockPath(job)
	_, statErr := os.Stat(p)
	f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, s.createErr(p, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	if ok, err := tryLockExclusive(f); !ok || err != nil {
		f.Close()
		if err == nil {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("idem: state file lock %s: %w", p, err)
	}
	return f, true, nil
}

// lockFile takes the file-wide lock (an exclusive lock on path + ".lock")
// that serializes every read-modify-write of the state file between
// processes; s.mu does it between goroutines and must be held first. Every
// write re-reads the file under it: the file holds all jobs, and a write
// based on a stale read would undo another job's change.
func (s *StateFile) lockFile() (unlock func(), err error) {
	p := s.path + ".lock"
	_, statErr := os.Stat(p)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, s.createErr(p, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("idem: state file lock %s: %w", p, err)
	}
	return func() { f.Close() }, nil
}
