package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
)

// Errors that Run and the stores return. Match them with [errors.Is]; use
// [errors.As] with *[Error] for the key, attempt and fn's own error.
// ErrInvalidKey, ErrInProgress, ErrLeaseLost, ErrPruneRefused,
// ErrNotResolvable and ErrParamsMismatch are package idemstore's (the same values), since stores
// return them.
var (
	// ErrInvalidKey: the Key is empty, too long, not UTF-8 or has control
	// characters. Nothing was written.
	ErrInvalidKey = idemstore.ErrInvalidKey

	// ErrInProgress: another holder has a live lease on the key (or, for the
	// state file, holds its lock). fn did not run. Try again later, or pass
	// [WaitForTurn] to wait for the holder.
	ErrInProgress = idemstore.ErrInProgress

	// ErrUnknownOutcome: an earlier attempt may or may not have had its effect
	// (it was killed, or fn failed in a mode that cannot retry blindly), and
	// nothing can tell which. fn will not run again until an operator calls
	// Resolve, or a [TwoPhase] check answers.
	ErrUnknownOutcome = errors.New("idem: outcome unknown, awaiting Resolve")

	// ErrBackingOff: the key failed recently and its next attempt is not
	// allowed yet. [Error.NotBefore] says when it is.
	ErrBackingOff = errors.New("idem: backing off after a failure")

	// ErrParked: the key is parked until an operator calls Reset: it
	// failed as often as the [Backoff] allows (the backoff gave up), or
	// with a [Permanent] error. [Retry] returns it when its backoff gives
	// up.
	ErrParked = errors.New("idem: key parked until Reset")

	// ErrLeaseLost: the attempt no longer holds its key. Either a newer
	// attempt took the key over (its holder stalled past the lease): a
	// renewal or a fenced write found the key held by another attempt, the
	// attempt's done mark was refused, and the key belongs to the newer
	// attempt. Or, from [CheckLease], the lease ran out by this process's
	// clock without a renewal (the process stalled), whether or not another
	// attempt has taken the key yet. The error's text says which.
	ErrLeaseLost = idemstore.ErrLeaseLost

	// ErrInvalidOption: an option was given a value it cannot take (a
	// negative duration, say). Nothing was written.
	ErrInvalidOption = errors.New("idem: invalid option")

	// ErrNewerSchema: the ledger was written by a version of idem whose
	// schema is two or more versions newer than this one's (one newer is
	// used as it is: see [SchemaVersion]). Nothing was written to it.
	ErrNewerSchema = errors.New("idem: ledger schema is newer than this version of idem")

	// ErrPruneRefused: Prune was asked to forget periods that catch-up can
	// still reach, or that are not settled. Nothing was deleted.
	ErrPruneRefused = idemstore.ErrPruneRefused

	// ErrNotResolvable: Resolve or Reset was asked to change a key that is
	// done, or that a live attempt holds.
	ErrNotResolvable = idemstore.ErrNotResolvable

	// ErrNestedRun: Run or RunTx (or Each, for its period's done mark) was
	// called inside fn for the very key that the enclosing Run holds (fn's
	// context carries its [Info]), and would find its own key held. Nothing
	// was claimed, and the error is [Permanent]: returned by the enclosing
	// fn, it parks the key at once. For business writes that commit with a
	// catch-up period's done mark, use [CatchUpTx] instead of RunTx inside
	// [CatchUp].
	ErrNestedRun = errors.New("idem: run of a key inside the fn of its own run")

	// ErrParamsMismatch: the key was claimed for work with other
	// parameters ([WithParams]): its stored fingerprint differs from the
	// call's. Nothing ran and nothing was written. The *Error (outcome
	// [ParamsMismatch]) wraps an *idemstore.MismatchError with both
	// fingerprints.
	ErrParamsMismatch = idemstore.ErrParamsMismatch

	// ErrNoValue: [RunValue] found the key done, but no value stored with
	// its done mark: it was marked done by Run, by Resolve, by a TwoPhase
	// check of the downstream (Recovered), or its record was pruned.
	ErrNoValue = errors.New("idem: no stored value")

	// ErrValueTooLarge: the value fn returned to [RunValue] encodes to
	// more than idemstore.MaxValue bytes. The key was not marked done; it
	// is parked, since a retry would compute a value as large.
	ErrValueTooLarge = errors.New("idem: value too large to store")

	// ErrValueEncoding: the value fn returned to [RunValue] does not
	// encode as JSON, or does not decode back into its type (the key was
	// not marked done: parked); or a stored value does not decode into the
	// type a later RunValue asks for (the key stays done).
	ErrValueEncoding = errors.New("idem: value does not encode or decode")

	// ErrDeferred: a [Guard] found the host overloaded, or a [Breaker] was
	// open, so the call stopped claiming work and left it for the next
	// trigger: the work it did not start stays unclaimed, with no attempt,
	// failure or park counted. [errors.As] with *[Deferral] tells why.
	ErrDeferred = errors.New("idem: deferred: the host or its downstream cannot take more now")
)

// Error is the error Run returns when the key's work is not done. It matches
// the sentinel of its Outcome (ErrParked, ErrInProgress, ...) and wraps Err,
// so both errors.Is(err, idem.ErrParked) and errors.Is(err, yourErr) hold.
type Error struct {
	Key       Key
	Outcome   Outcome
	Attempt   int64     // the attempt concerned; 0 if none was taken (BackingOff: the attempt that failed last)
	NotBefore time.Time // BackingOff: when the next attempt is allowed
	Holder    string    // InProgress: the owner of the live lease, when the store knows it, as stored (Error shows its host and pid)
	// LeaseUntil (InProgress) is when the holder's lease ends unless it
	// renews it, as the store reported it; zero when it did not.
	LeaseUntil time.Time
	Err        error // fn's error, the store's error, or nil (BackingOff: the last attempt's error)
}

func (e *Error) Error() string {
	if e.Outcome == BackingOff {
		// "idem: job/period: backing off until T after attempt 3 failed: why"
		msg := "idem: " + e.Key.String() + ": backing off"
		if !e.NotBefore.IsZero() {
			msg += " until " + e.NotBefore.UTC().Format(time.RFC3339Nano)
		}
		if e.Attempt > 0 {
			msg += fmt.Sprintf(" after attempt %d failed", e.Attempt)
		}
		if e.Err != nil {
			msg += ": " + e.Err.Error()
		}
		return msg
	}
	msg := "idem: " + e.Key.String()
	if e.Attempt > 0 {
		msg += fmt.Sprintf(" attempt %d", e.Attempt)
	}
	msg += ": " + e.Outcome.String()
	if e.Outcome == InProgress && e.Holder != "" {
		msg += " (held by " + holder.Short(e.Holder) + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the Outcome's sentinel and Err.
func (e *Error) Unwrap() []error {
	var errs []error
	if s := e.Outcome.sentinel(); s != nil {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Permanent wraps err to tell Run that retrying cannot help: the key is
// parked at once (ErrParked) instead of backing off. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// NothingHappened wraps err to declare that fn failed before causing any
// effect (it validated its input, or the downstream refused the request
// outright). In [AtMostOnce] and [TwoPhase] modes only such errors are
// retried blindly; any other error leaves the outcome in doubt, because a
// timeout from a payment gateway is no proof that nothing was paid.
// NothingHappened(nil) is nil.
func NothingHappened(err error) error {
	if err == nil {
		return nil
	}
	return &harmlessError{err}
}

type harmlessError struct{ err error }

func (e *harmlessError) Error() string { return e.err.Error() }
func (e *harmlessError) Unwrap() error { return e.err }

// IsPermanent reports whether err, or an error it wraps, was marked by
// [Permanent]: what a relay or a store of your own treats as "do not
// retry".
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

func isHarmless(err error) bool {
	var h *harmlessError
	return errors.As(err, &h)
}
