package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/idemgo/idem/idemstore"
)

// Exit codes. `idem run` uses all of them; the other commands use 0, 1 and 2.
const (
	exitOK      = 0 // run: at least one period ran and every due period is settled
	exitFailed  = 1 // run: the command failed, is backing off, or is parked; others: the operation was refused or failed
	exitUsage   = 2 // bad flags or arguments, or the ledger cannot be opened
	exitDone    = 3 // run: nothing was due, every period was done already
	exitBusy    = 4 // run: another run holds a period, or a period waits for another job's (--after)
	exitUnknown = 5 // run: a period's outcome is unknown and needs `idem resolve`

	exitMismatch = 6 // run: a period was first run with other --params; nothing was started
	exitStore    = 7 // the store cannot be opened or written: a full disk, a read-only file system, too many open files, a failed fsync
)

// storeProblem reports an error that says the store cannot be opened or
// written (exit 7): a store that refuses writes after a failed fsync, or a
// file system error (full, read-only, out of file descriptors, I/O error,
// permission denied).
func storeProblem(err error) bool {
	if idemstore.IsFatal(err) {
		return true
	}
	for _, errno := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EMFILE, syscall.ENFILE, syscall.EIO, syscall.EACCES, syscall.EPERM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// exitError makes the process exit with code, after printing err (if any)
// and then hint (if any) on stderr.
type exitError struct {
	code int
	err  error
	hint string // a line of advice printed after err
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// fail returns an exitError with a formatted message.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usageError marks err as a usage or setup error (exit 2).
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// flagError is usageError of err, the error a flag's value gave, as
// "--flag: why": the library's "idem: " prefix is left out of the middle of
// the line (the line starts with it once). err stays matchable.
func flagError(flag string, err error) error { return usageError(&flagValueError{flag, err}) }

type flagValueError struct {
	flag string
	err  error
}

func (e *flagValueError) Error() string {
	return e.flag + ": " + strings.TrimPrefix(e.err.Error(), "idem: ")
}

func (e *flagValueError) Unwrap() error { return e.err }
