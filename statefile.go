package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/idemgo/idem/idemstore"
)

// ErrOutOfOrder: a state file keeps one watermark per job, so a job's
// periods must be done in order, one at a time, and must sort in time order
// as strings.
var ErrOutOfOrder = errors.New("idem: state file: period out of order")

// StateFile is a [Store] in one JSON file, for jobs with no database: a
// daily report mail, an IM push. Per job it keeps the seeds' watermark
// ({"lastDonePeriod", "status", "pendingPeriod"}) plus what the modes need.
// Of fingerprints ([WithParams]) and stored values ([RunValue]) it keeps
// those of the pending period and of the last done period only: an older
// done period, done by the watermark, has neither (no check, [ErrNoValue]).
// In AtLeastOnce, whose claim writes nothing, the fingerprint is written
// with the attempt's end.
//
// The file is a WATERMARK: a period at or before the job's last done period
// counts as done. So a job's periods must sort in time order as strings
// (zero-padded, like "2026-10-27"; [Daily] and friends name them so) and are
// done in order: while one period is pending (running, failed, unknown or
// parked), another period of the job waits ([ErrOutOfOrder]). Backfilling a
// period older than the watermark is not possible here; use a [Ledger].
// Nor has it an outbox: it is no transactional store, so there is no
// RunTx body in which outbox.Put could queue a message (outbox.ErrNoOutbox); a job
// that must notify another system after its own writes needs a Ledger.
//
// Every write is atomic and durable: a temp file in the same directory,
// fsync, rename over the file, fsync of the directory. A failed fsync is
// fatal: the store refuses every later write, since the kernel may have
// dropped the data it failed to write.
//
// Mutual exclusion is a flock on a sidecar lock file per job
// (path + ".<hash>.lock"), held while an attempt runs and released by the
// kernel when its process dies; every read-modify-write of the file also
// holds a file-wide flock (path + ".lock"). It works between processes of ONE host,
// not across hosts (network filesystems do not honour flock reliably).
// The store keeps these lock files (and, on Unix, the directory, for its
// fsync) open between calls, until [StateFile.Close]; a lock counts only
// while the lock file's path still names the file it was taken on, so a
// lock file removed by hand is opened anew. Each read reads the whole file;
// one whose bytes are those last decoded is not decoded again.
//
// On Windows the locks are LockFileEx's (an exclusive lock on all of the
// lock file), which the system releases when their process ends, though
// not always at once. A write there is a temp file in the same directory,
// FlushFileBuffers, then MoveFileEx with MOVEFILE_REPLACE_EXISTING and
// MOVEFILE_WRITE_THROUGH, which returns once the replace is on disk.
// Windows has no directory fsync: the directory entry of a new lock file is
// as durable as NTFS's journal makes it, no more. Windows refuses to
// replace a file that another process has open: the replace is retried
// while a store in another process reads the file (which takes it for one
// read), for up to 2 s; a file held open longer than that (by a program
// other than idem) fails the write, and the store refuses every later one,
// as after a failed fsync.
//
// The lock never expires while its holder lives: a stalled holder is never
// taken over, and every other Run of the job finds it in progress
// ([ErrInProgress]) until the attempt ends or its process dies (the kernel
// then releases the lock at once). [WithLease] still sets how long a stall
// may last before [CheckLease] refuses: an attempt whose heartbeat has not
// renewed for the lease (a long GC pause, a frozen VM) gets ErrLeaseLost
// from CheckLease, as on a ledger, although nobody took its lock. Its done
// mark is still written if fn returns nil. It does NOT promise anything
// across hosts, nor that a stalled holder stops by itself.
//
// Modes: an AtLeastOnce claim writes nothing to the state file (the lock is
// enough, and a crash only means fn runs again), so a fresh Run costs one
// durable write. AtMostOnce and TwoPhase write the pending mark durably
// before fn runs. Every claim records its attempt number in the job's lock
// file (not synced), so that attempt numbers never repeat, even after a
// process died between a claim and its end; after a power loss an
// AtLeastOnce attempt number may repeat.
type StateFile struct {
	path     string
	dir      string
	defaults []Option
	clock    Clock // for the times the store takes itself (Start's); WithClock among defaults

	mu       sync.Mutex // serializes read-modify-write in this process
	held     map[string]*heldLock
	jobLocks map[string]*keptFile // job → its lock file, kept open between its locks (s.mu)
	fileLock *keptFile            // the file-wide lock file, kept open (s.mu)
	dirFile  *keptFile            // the directory, kept open for its fsync (Unix; s.mu)
	broken   error                // a failed fsync: no more writes

	cache atomic.Pointer[stateCache] // what the file held when last read or written
}

// stateStore is a StateFile as the engine sees it, with the methods of
// the store interfaces that its users never call ([idemstore.Of] returns
// it).
type stateStore struct{ *StateFile }

var (
	_ idemstore.CatchUpStore = stateStore{}
	_ idemstore.Lister       = stateStore{}
	_ idemstore.Releaser     = stateStore{}
	_ Store                  = (*StateFile)(nil)
)

// OpenStateFile returns the state file store at path. The directory must
// exist; the file is created on the first write. An existing file is read
// and checked at once: a corrupt one is reported ([ErrCorruptState]) with
// its path and left untouched. opts become defaults for every call on the
// store (see [Option]); an invalid one is an error matching
// [ErrInvalidOption] that names path, returned before the file is read.
//
// The file must be a regular file: a directory, a named pipe, a socket or
// a device is refused (without opening it, so a FIFO cannot block).
//
// A path that is a symbolic link is followed, once, here: the store reads,
// writes and locks the link's target (its temp files, its lock files and
// the directory it fsyncs are those of the target's directory), so the
// link stays a link and the target gets every update. The target must
// exist; a dangling link is refused. Re-pointing the link while a store
// is open is not noticed: the open store keeps using the old target while
// a store opened afterwards uses the new one, and the two do not exclude
// each other (their locks lie beside different files). Re-point a link
// only while no process has the state file open.
func OpenStateFile(path string, opts ...Option) (*StateFile, error) {
	if path == "" {
		return nil, errors.New("idem: state file path is empty")
	}
	cfg := storeConfig(opts)
	if cfg.err != nil {
		return nil, fmt.Errorf("idem: state file %s: %w", path, cfg.err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(abs)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("idem: state file %s: directory: %w", abs, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("idem: state file %s: %s is not a directory", abs, dir)
	}
	if abs, err = resolveStateFile(abs); err != nil {
		return nil, err
	}
	s := &StateFile{path: abs, dir: filepath.Dir(abs), defaults: slices.Clone(opts), clock: cfg.clock, held: map[string]*heldLock{}, jobLocks: map[string]*keptFile{}}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s, nil
}

// resolveStateFile follows abs if it is a symbolic link and checks that
// what it names is a regular file or does not exist yet. It returns the
// path to use: abs, or the link's target.
func resolveStateFile(abs string) (string, error) {
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return abs, nil
	case err != nil:
		return "", fmt.Errorf("idem: state file %s: %w", abs, err)
	case fi.Mode()&os.ModeSymlink != 0:
		dest, _ := os.Readlink(abs)
		target, err := filepath.EvalSymlinks(abs)
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("idem: state file %s: a symbolic link to %s, which does not exist (create the target, or remove the link)", abs, dest)
		}
		if err != nil {
			return "", fmt.Errorf("idem: state file %s: a symbolic link to %s that cannot be followed: %w", abs, dest, err)
		}
		if target, err = filepath.Abs(target); err != nil {
			return "", err
		}
		if fi, err = os.Stat(target); err != nil {
			return "", fmt.Errorf("idem: state file %s (a symbolic link to %s): %w", abs, target, err)
		}
		if err := regularFile(target, fi); err != nil {
			return "", fmt.Errorf("%w (the target of the symbolic link %s)", err, abs)
		}
		return target, nil
	}
	return abs, regularFile(abs, fi)
}

// regularFile refuses a state file that is not a regular file.
func regularFile(path string, fi os.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return fmt.Errorf("idem: state file %s: is a directory", path)
	default:
		return fmt.Errorf("idem: state file %s: is %s, not a regular file (left untouched)", path, fileKind(m))
	}
}

// fileKind names what a file that is not a regular file or a directory is.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "of type " + m.Type().String()
}

// readRegularFile reads the file at path through an *os.File, refusing
// anything but a regular file without blocking (a FIFO put in the file's
// place is opened non-blocking and refused, never read). readRegular
// (statefile_read_*.go) is the same.
func readRegularFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// Path returns the state file's path: the target's, if the path given to
// OpenStateFile was a symbolic link.
func (s *StateFile) Path() string { return s.path }

// Run runs fn for key with the protocol of [RunOn].
func (s *StateFile) Run(ctx context.Context, key Key, fn func(context.Context) error, opts ...Option) error {
	return RunOn(ctx, s, key, fn, opts...)
}

// DefaultOptions returns the options given to OpenStateFile: the defaults
// of every Run and [CatchUp] on the store.
func (s stateStore) DefaultOptions() []Option { return s.defaults }
