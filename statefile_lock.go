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

// keptFile is a file the store keeps open between its uses (a lock file,
// the directory it fsyncs), with its identity when opened. An open file
// keeps its inode allocated, so no other file can take that identity while
// the store holds it: a path that still names the same file (stillAt) was
// neither removed nor replaced since it was opened.
type keptFile struct {
	f  *os.File
	fi os.FileInfo
}

// stillAt reports whether the path k was opened at still names k's file.
func (k *keptFile) stillAt() bool {
	fi, err := os.Stat(k.f.Name())
	return err == nil && os.SameFile(fi, k.fi)
}

// keep records the identity of f, just opened, to keep it open.
func keep(f *os.File) (*keptFile, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &keptFile{f: f, fi: fi}, nil
}

// keptTries bounds how many times a lock is taken again on a lock file
// found removed or replaced since it was opened (each time the file at the
// path is opened anew).
const keptTries = 3

// tryLock takes job's lock without waiting; ok is false if another holder
// (process or goroutine) has it. The caller holds s.mu. The job's lock
// file stays open after the lock is released (unlockJob), for the job's
// next lock, until Close; a lock taken on it counts only while its path
// still names it (a lock file removed or replaced by hand is opened
// anew), so that a lock is always on the file that other processes open.
func (s *StateFile) tryLock(job string) (f *os.File, ok bool, err error) {
	if s.held[job] != nil {
		return nil, false, nil // an attempt of this process holds it
	}
	k := s.jobLocks[job]
	ok, err = s.lockKept(&k, s.lockPath(job), tryLockExclusive)
	if k == nil {
		delete(s.jobLocks, job)
		return nil, false, err
	}
	s.jobLocks[job] = k
	return k.f, ok, err
}

// lockKept takes a lock with lock on the kept lock file *k, opening the
// file at p first when *k is nil. The lock counts only while p still names
// the file it was taken on: a file removed or replaced since it was opened
// is closed (releasing the lock) and the file at p opened anew, keptTries
// times at most. On an error *k is nil, closed.
func (s *StateFile) lockKept(k **keptFile, p string, lock func(*os.File) (bool, error)) (bool, error) {
	for range keptTries {
		if *k == nil {
			f, err := s.openLockFile(p)
			if err != nil {
				return false, err
			}
			if *k, err = keep(f); err != nil {
				return false, fmt.Errorf("idem: state file lock %s: %w", p, err)
			}
		}
		ok, err := lock((*k).f)
		if err == nil && (*k).stillAt() {
			return ok, nil
		}
		unlockClose((*k).f) // failed, or removed or replaced: a lock on it excludes nobody
		*k = nil
		if err != nil {
			return false, fmt.Errorf("idem: state file lock %s: %w", p, err)
		}
	}
	return false, fmt.Errorf("idem: state file lock %s: removed or replaced each time it was locked", p)
}

// forgetJobLock closes job's kept lock file (releasing a lock taken on it).
func (s *StateFile) forgetJobLock(job string) {
	if k := s.jobLocks[job]; k != nil {
		delete(s.jobLocks, job)
		unlockClose(k.f)
	}
}

// unlockJob releases job's lock, taken on f by tryLock. f stays open for
// the job's next lock, unless Close let go of it while the lock was held
// (it is closed now) or the unlock failed (closing f releases the lock).
// The caller holds s.mu.
func (s *StateFile) unlockJob(job string, f *os.File) {
	if k := s.jobLocks[job]; k != nil && k.f == f {
		if err := unlockFile(f); err != nil {
			s.forgetJobLock(job)
		}
		return
	}
	unlockClose(f)
}

// Close closes the files the store keeps open between calls: the lock
// files of the jobs it has run (a job's lock file is opened on the job's
// first Run and kept), the file-wide lock file, and (on Unix) the state
// file's directory, kept for its fsync. It holds no lock when they are
// closed. The job's lock of an attempt in progress is not released: its
// lock file is closed when the attempt ends. The store stays usable after
// Close (a later call opens what it needs, and keeps it, again), so Close
// may be called at any time and more than once. A StateFile that is never
// closed holds only these descriptors (one per job, and two), no lock and
// no other resource; they are closed when it is garbage collected.
func (s *StateFile) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for job, k := range s.jobLocks {
		delete(s.jobLocks, job)
		if h := s.held[job]; h == nil || h.f != k.f { // else its attempt closes it when it ends
			errs = append(errs, k.f.Close())
		}
	}
	for _, k := range []**keptFile{&s.fileLock, &s.dirFile} {
		if *k != nil {
			errs = append(errs, (*k).f.Close())
			*k = nil
		}
	}
	return errors.Join(errs...)
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
// based on a stale read would undo another job's change. The lock file
// stays open after unlock, until Close; as for a job's lock (tryLock), a
// lock counts only while the path still names the file it was taken on.
func (s *StateFile) lockFile() (unlock func(), err error) {
	_, err = s.lockKept(&s.fileLock, s.path+".lock", func(f *os.File) (bool, error) { return true, lockExclusive(f) })
	if err != nil {
		return nil, err
	}
	return s.unlockFileLock, nil
}

// unlockFileLock releases the file-wide lock; its file stays open.
func (s *StateFile) unlockFileLock() {
	if err := unlockFile(s.fileLock.f); err != nil {
		s.forgetFileLock() // closing it releases the lock
	}
}

// forgetFileLock closes the kept file-wide lock file (releasing a lock
// taken on it).
func (s *StateFile) forgetFileLock() {
	if s.fileLock != nil {
		unlockClose(s.fileLock.f)
		s.fileLock = nil
	}
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
