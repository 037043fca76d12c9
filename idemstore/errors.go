package idemstore

import (
	"errors"
	"fmt"
)

// Errors that stores return, and that package idem re-exports under the
// same names (the same values: errors.Is(err, idem.ErrLeaseLost) and
// errors.Is(err, idemstore.ErrLeaseLost) agree). A store returns them
// wrapped, with the key and what it found.
var (
	// ErrInvalidKey: the Key is empty, too long, not UTF-8 or has control
	// characters. Nothing was written. [KeyError] matches it.
	ErrInvalidKey = errors.New("idem: invalid key")

	// ErrInProgress: another holder has a live lease on the key (or, for the
	// state file, holds its lock). fn did not run. Try again later, or pass
	// idem.WaitForTurn to wait for the holder. A store returns it where it
	// cannot wait for the holder (the state file's Start).
	ErrInProgress = errors.New("idem: key in progress elsewhere")

	// ErrLeaseLost: the attempt no longer holds its key. Either a newer
	// attempt took the key over (its holder stalled past the lease): a
	// renewal or a fenced write found the key held by another attempt, the
	// attempt's done mark was refused, and the key belongs to the newer
	// attempt. Or, from idem.CheckLease, the lease ran out by this process's
	// clock without a renewal (the process stalled), whether or not another
	// attempt has taken the key yet. The error's text says which.
	ErrLeaseLost = errors.New("idem: lease lost")

	// ErrPruneRefused: Prune was asked to forget periods that catch-up can
	// still reach, or that are not settled. Nothing was deleted.
	ErrPruneRefused = errors.New("idem: prune refused")

	// ErrNotResolvable: Resolve or Reset was asked to change a key that is
	// done, or that a live attempt holds.
	ErrNotResolvable = errors.New("idem: key cannot be resolved in its current state")

	// ErrParamsMismatch: the key was claimed for work with other parameters
	// (its fingerprint, idem.WithParams, differs from the call's). Nothing
	// ran and nothing was written. [MismatchError] matches it.
	ErrParamsMismatch = errors.New("idem: params mismatch")
)

// MismatchError is the error of a call whose fingerprint differs from the
// one the key was claimed with. It matches [ErrParamsMismatch] and names
// the key and both fingerprints in short form ([ShortFingerprint]).
type MismatchError struct {
	Key    Key
	Stored string // the key's fingerprint (Record.Fingerprint)
	Given  string // the call's
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: %s was claimed with params %s, this call has %s; nothing ran",
		ErrParamsMismatch, e.Key, ShortFingerprint(e.Stored), ShortFingerprint(e.Given))
}

// Is reports whether target is ErrParamsMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrParamsMismatch }

// Fatal marks err as an error after which the store refuses every write
// (a state file whose fsync failed: the kernel may have dropped the data it
// failed to write). The engine does not retry such an error. Fatal(nil) is
// nil; the error's text is err's.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err}
}

// IsFatal reports whether err, or an error it wraps, was marked by
// [Fatal].
func IsFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }
