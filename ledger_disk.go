package idem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"github.com/idemgo/idem/idemstore"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// What a failing disk does to a ledger.
//
// A write whose commit failed with a disk error (SQLite's SQLITE_IOERR_*
// or SQLITE_FULL: a failed write, fsync, truncate or directory sync) may
// or may not be on disk: after a failed fsync the kernel may have dropped
// the pages it could not write, or marked them clean, so that a second
// fsync returns 0 for data that is not there (PostgreSQL's "fsyncgate").
// Such an error is fatal for the Ledger handle, as it is for a state
// file: the call returns it (never nil, never ErrLeaseLost), the engine
// does not retry it, and every later write of the handle returns it
// again until the ledger is opened anew. A new handle reads the file as it
// is: the failed commit is there or not, whole or not at all.
//
// The error names what failed and, as far as the file system tells, why:
// a full file system as "no space left on device", a process out of file
// descriptors as "too many open files", a read-only file system or file
// as read-only; the syscall error is in the chain, so errors.Is(err,
// syscall.ENOSPC) and the like match.

// sqliteCode returns the extended result code of a SQLite error in err's
// chain, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// isDiskFailure reports a SQLite error after which what the connection
// wrote may or may not be durable: SQLITE_IOERR (any kind) and
// SQLITE_FULL.
func isDiskFailure(code int) bool {
	switch code & 0xff {
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
		return true
	}
	return false
}

// ioOps names the system call behind SQLite's extended I/O error codes.
var ioOps = map[int]string{
	sqlite3.SQLITE_IOERR_READ:       "read",
	sqlite3.SQLITE_IOERR_SHORT_READ: "read (short)",
	sqlite3.SQLITE_IOERR_WRITE:      "write",
	sqlite3.SQLITE_IOERR_FSYNC:      "fsync",
	sqlite3.SQLITE_IOERR_DIR_FSYNC:  "directory fsync",
	sqlite3.SQLITE_IOERR_TRUNCATE:   "ftruncate",
	sqlite3.SQLITE_IOERR_FSTAT:      "fstat",
	sqlite3.SQLITE_IOERR_DELETE:     "unlink",
	sqlite3.SQLITE_IOERR_SHMOPEN:    "open of the -shm file",
	sqlite3.SQLITE_IOERR_SHMSIZE:    "growing the -shm file",
	sqlite3.SQLITE_IOERR_SHMMAP:     "mmap of the -shm file",
	sqlite3.SQLITE_IOERR_MMAP:       "mmap",
	sqlite3.SQLITE_IOERR_DIR_CLOSE:  "close of the directory",
	sqlite3.SQLITE_IOERR_CLOSE:      "close",
	sqlite3.SQLITE_IOERR_LOCK:       "lock",
	sqlite3.SQLITE_IOERR_UNLOCK:     "unlock",
	sqlite3.SQLITE_IOERR_RDLOCK:     "read lock",
	sqlite3.SQLITE_IOERR_SEEK:       "seek",
	sqlite3.SQLITE_FULL:             "write",
}

// diskError is a ledger's error that the file system caused: a failed
// write, fsync, directory sync or open. Path is the file or directory; Op
// the system call, as far as it is known ("fsync", "write", "open"...);
// Err the cause: a syscall.Errno joined to the store's own error where
// the file system tells it (ENOSPC for a full file system, EMFILE, EROFS,
// EACCES), else the store's own error alone, so that errors.Is(err,
// syscall.ENOSPC) matches an error with such a cause.
type diskError struct {
	Path string
	Op   string
	Err  error
	// Detail says what was found (how many bytes are free, which limit
	// was reached), or is empty.
	Detail string
}

func (e *diskError) Error() string {
	s := e.Path + ": " + e.Op + ": " + e.Err.Error()
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *diskError) Unwrap() error { return e.Err }

// diagnose looks for why an operation on path (a file of the ledger, or
// its directory) failed with err: a full file system, a process out of
// file descriptors, a ledger file or directory that cannot be written. It
// returns a *diskError with the cause it found joined to err, or nil if it
// finds none.
func diagnose(path, op string, err error) *diskError {
	dir := path
	if fi, serr := os.Stat(path); serr != nil || !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	cause := func(errno syscall.Errno, detail string) *diskError {
		e := &diskError{Path: path, Op: op, Err: err, Detail: detail}
		if errno != 0 {
			e.Err = fmt.Errorf("%w: %w", errno, err)
		}
		return e
	}
	if full, detail := fsFull(dir); full {
		return cause(syscall.ENOSPC, detail)
	}
	if errno, detail := outOfFiles(); errno != 0 {
		return cause(errno, detail)
	}
	if dir != path {
		if msg, errno := unwritableCause(path); msg != "" {
			return cause(errno, msg)
		}
	} else if werr := checkWritable(dir); werr != nil {
		return cause(errnoOf(werr), "the directory is read-only or not writable by this process")
	}
	if sqliteCode(err)&0xff == sqlite3.SQLITE_FULL {
		return cause(syscall.ENOSPC, "SQLite's write was refused for lack of space")
	}
	return nil
}

// diskErr is diagnose's error, or err as it is when nothing was found.
func diskErr(path, op string, err error) error {
	if d := diagnose(path, op, err); d != nil {
		return d
	}
	return err
}

// outOfFiles reports whether this process cannot open one more file:
// EMFILE (its limit) or ENFILE (the system's), with a detail.
func outOfFiles() (syscall.Errno, string) {
	f, err := os.Open(os.DevNull)
	if err == nil {
		f.Close()
		return 0, ""
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && (errno == syscall.EMFILE || errno == syscall.ENFILE) {
		return errno, fileLimit()
	}
	return 0, ""
}

// ledgerBroken holds the fatal error of a Ledger handle whose write
// failed on the disk; nil while it writes.
type ledgerBroken struct{ err atomic.Pointer[error] }

func (b *ledgerBroken) get() error {
	if p := b.err.Load(); p != nil {
		return *p
	}
	return nil
}

// set keeps the first fatal error and returns the one kept.
func (b *ledgerBroken) set(err error) error {
	b.err.CompareAndSwap(nil, &err)
	return b.get()
}

// diskFailure turns err, from a write transaction of the ledger that
// failed on the disk, into the handle's fatal error (the first one, if
// an earlier write already broke the handle).
func (l *Ledger) diskFailure(err error) error {
	code := sqliteCode(err)
	op := ioOps[code]
	if op == "" {
		op = "write"
	}
	path := l.file.pathOr(l.dbFile)
	var cause error = &diskError{Path: path, Op: op, Err: err}
	if d := diagnose(path, op, err); d != nil {
		cause = d
	}
	return l.broken.set(idemstore.Fatal(fmt.Errorf("%w: %w", errLedgerBroken, cause)))
}

// errLedgerBroken starts the message of a Ledger handle's fatal error.
var errLedgerBroken = errors.New("a write failed on the disk, so what it wrote may not be durable; this ledger handle refuses further writes until it is opened anew")

// syncWALDir makes the directory entry of the ledger's -wal file durable,
// once for each file: SQLite syncs the directory when it creates the
// file but ignores a failure (and does not sync it at all for a -wal file
// another connection created), and a commit that lives in a -wal file
// whose name a power loss can take away is not durable. It is called
// after each durable commit; it costs a stat while the -wal file is the
// one whose entry was synced. A failure is the handle's fatal error.
func (l *Ledger) syncWALDir() error {
	if l.dbFile == "" {
		return nil // an in-memory or temporary database
	}
	wal := l.dbFile + "-wal"
	fi, err := os.Stat(wal)
	if err != nil {
		// No -wal file: the commit was checkpointed into the database
		// file, whose entry is durable since it was created.
		return nil
	}
	if p := l.walSynced.Load(); p != nil && os.SameFile(*p, fi) {
		return nil
	}
	dir := filepath.Dir(wal)
	if err := syncDir(dir); err != nil {
		cause := diskErr(dir, "directory fsync", err)
		return l.broken.set(idemstore.Fatal(fmt.Errorf("%w: the directory entry of %s: %w", errLedgerBroken, wal, cause)))
	}
	l.walSynced.Store(&fi)
	return nil
}

// pathOr returns the path of the ledger's file, or alt for an attached
// ledger (c is nil).
func (c *ledgerConnector) pathOr(alt string) string {
	if c == nil {
		return alt
	}
	return c.path
}
