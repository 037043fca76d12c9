package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The state file's locks are whole-file exclusive locks on sidecar files
// (see [StateFile]): flock(2) on Unix (statefile_lock_unix.go), LockFileEx
// on Windows (statefile_lock_windows.go). Either way the lock belongs to the
// open file, so two opens of one lock file exclude each other even within
// one process, and the operating system releases it when the file is closed
// or its process dies.

// lockPath is the sidecar lock file of job.
func (s *StateFile) lockPath(job string) string {
	h := sha256.Sum256([]byte(job))
	return s.path + "." + hex.EncodeToString(h[:6]) + ".lock"
}

// tryLock takes job's lock without waiting; ok is false if another holder
// (process or goroutine) has it.
func (s *StateFile) tryLock(job string) (f *os.File, ok bool, err error) {
	p := s.lockPath(job)
	if f, err = s.openLockFile(p); err != nil {
		return nil, false, err
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

// openLockFile opens the lock file p, creating it if it does not exist;
// the directory entry of a new one is made durable (the directory is
// fsynced). A lock file that exists, the common case, costs one open.
func (s *StateFile) openLockFile(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, s.createErr(p, err)
	}
	if f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, s.createErr(p, err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// attemptMarkLen is the size of the attempt number a job's lock file keeps:
// 20 digits and a newline.
const attemptMarkLen = 21

// lastClaimed reads the last attempt number claimed for the job whose lock
// file f is (held): 0 for a lock file that has none (a new one, or one an
// older idem left empty).
func lastClaimed(f *os.File) (int64, error) {
	var b [attemptMarkLen]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	v, perr := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	if perr != nil || v < 0 {
		return 0, nil
	}
	return v, nil
}

// markClaimed records attempt as the last claimed in the held lock file f.
// It is not synced: it survives the death of the process (what reuses an
// attempt number without it), not a power loss.
func markClaimed(f *os.File, attempt int64) error {
	_, err := f.WriteAt([]byte(fmt.Sprintf("%20d\n", attempt)), 0)
	return err
}

// unlockClose releases the lock held on f and closes f. The explicit unlock
// matters on Unix: a lock goes with the open file description, which a
// child this process forks at that moment shares until its exec: closing f
// alone would leave the lock held that long.
func unlockClose(f *os.File) {
	_ = unlockFile(f)
	f.Close()
}

// lockFile takes the file-wide lock (an exclusive lock on path + ".lock")
// that serializes every read-modify-write of the state file between
// processes; s.mu does it between goroutines and must be held first. Every
// write re-reads the file under it: the file holds all jobs, and a write
// based on a stale read would undo another job's change.
func (s *StateFile) lockFile() (unlock func(), err error) {
	p := s.path + ".lock"
	f, err := s.openLockFile(p)
	if err != nil {
		return nil, err
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("idem: state file lock %s: %w", p, err)
	}
	return func() { unlockClose(f) }, nil
}

// readLocked takes the file-wide lock and reads the file under it; the
// caller writes (if at all) and then calls unlock.
func (s *StateFile) readLocked() (doc *stateDoc, unlock func(), err error) {
	if unlock, err = s.lockFile(); err != nil {
		return nil, nil, err
	}
	if doc, err = s.read(); err != nil {
		unlock()
		return nil, nil, err
	}
	return doc, unlock, nil
}
