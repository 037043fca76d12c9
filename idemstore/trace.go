package idemstore

import (
	"context"
	"errors"
	"time"
)

// Point names a boundary of the Run protocol where a process can die. The
// idemtest package stops a run at each of them, in-process or with a real
// SIGKILL, to prove that a job survives a crash there.
type Point string

// The crash points. Every store passes BeforeClaim, AfterClaim, AfterFn and
// AfterDone; MidWrite and AfterRename are the state file's own.
const (
	BeforeClaim Point = "before-claim" // nothing written yet
	AfterClaim  Point = "after-claim"  // the claim (the pending mark, in TwoPhase) is committed; fn has not started
	AfterFn     Point = "after-fn"     // fn returned; its done mark is not written (RunTx: not committed)
	MidWrite    Point = "mid-write"    // state file: the temp file is written, not yet synced or renamed
	AfterRename Point = "after-rename" // state file: renamed over the old file, directory not yet synced
	AfterDone   Point = "after-done"   // the done mark is durable; Run has not returned
)

// Points lists every crash point in protocol order.
func Points() []Point {
	return []Point{BeforeClaim, AfterClaim, MidWrite, AfterRename, AfterFn, AfterDone}
}

// Trace hooks into a run. It is carried by the context (like
// net/http/httptrace) so that it reaches the store as well as idem's Run.
type Trace struct {
	// Checkpoint is called at each Point the run reaches. A non-nil error
	// stops the run right there, the way a SIGKILL would: nothing more is
	// written, no lease is released, the heartbeat stops, and Run returns
	// an error wrapping the one returned here.
	Checkpoint func(ctx context.Context, p Point, key Key) error

	// WriteLock, if set, is called by a store that takes a database's
	// write lock (the SQLite ledger) each time one of its writes got it,
	// with how long it waited for it (queued in the process and at the
	// database). It must be quick and safe for concurrent use.
	WriteLock func(waited time.Duration)
}

type traceKey struct{}

// WithTrace returns a context that carries t to every Run and store call
// made with it. Package idemtest's CrashAt and KillAt are built on it.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// Checkpoint reports that the run of key reached p. Stores call it at their
// own crash points; it returns nil unless a [Trace] asks to stop there, and
// then the caller must return the error at once, writing nothing more (a
// transaction under way is rolled back), and pass it up unwrapped or
// wrapped with %w: the engine recognises it with [IsStop].
func Checkpoint(ctx context.Context, p Point, key Key) error {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	if t == nil || t.Checkpoint == nil {
		return nil
	}
	if err := t.Checkpoint(ctx, p, key); err != nil {
		return &stopError{p, err}
	}
	return nil
}

// stopError marks an error from a Trace checkpoint: the run must stop
// without writing anything more.
type stopError struct {
	p   Point
	err error
}

func (e *stopError) Error() string { return "idem: stopped at " + string(e.p) + ": " + e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

// IsStop reports whether err is, or wraps, the error of a [Checkpoint]
// that stopped the run. A store that wraps its errors with a text of its
// own may pass such an error through as it is.
func IsStop(err error) bool {
	var s *stopError
	return errors.As(err, &s)
}

// WriteLockWaited reports to ctx's [Trace], if it has a WriteLock hook,
// that a write waited d for the database's write lock.
func WriteLockWaited(ctx context.Context, d time.Duration) {
	if t, _ := ctx.Value(traceKey{}).(*Trace); t != nil && t.WriteLock != nil {
		t.WriteLock(d)
	}
}
