// Package idemtest proves that jobs run with idem survive crashes: it stops
// a run at every protocol boundary, in-process or with a real SIGKILL, and
// gives a fake clock so that leases expire without waiting. Its conformance
// kit proves a store: the suite [TestStore], and the model-based test
// [TestModel].
package idemtest

import (
	"context"
	"errors"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/proc"
)

// Point is a crash point of the Run protocol (package idemstore's): where
// [CrashAt], [KillAt] and [EveryCrashPoint] stop a run. It is here so that
// a job's tests need no other package than idem and idemtest.
type Point = idemstore.Point

// The crash points, in protocol order (see Points). Every store
// passes BeforeClaim, AfterClaim, AfterFn and AfterDone; MidWrite and
// AfterRename are the state file's own.
const (
	BeforeClaim = idemstore.BeforeClaim // nothing written yet
	AfterClaim  = idemstore.AfterClaim  // the claim (the pending mark, in TwoPhase) is committed; fn has not started
	MidWrite    = idemstore.MidWrite    // state file: the temp file is written, not yet synced or renamed
	AfterRename = idemstore.AfterRename // state file: renamed over the old file, directory not yet synced
	AfterFn     = idemstore.AfterFn     // fn returned; its done mark is not written (RunTx: not committed)
	AfterDone   = idemstore.AfterDone   // the done mark is durable; Run has not returned
)

// ErrCrashed is returned (wrapped) by a Run that [CrashAt] stopped.
var ErrCrashed = errors.New("idemtest: crashed")

// CrashAt returns a context that stops any Run made with it at point p, as a
// SIGKILL would: nothing more is written, no lease is released, and Run
// returns an error matching ErrCrashed. Only the first time p is reached
// crashes; later points pass.
func CrashAt(ctx context.Context, p Point) context.Context {
	return CrashWhen(ctx, func(at Point, _ idem.Key) bool { return at == p })
}

// KillAt returns a context that makes this process SIGKILL itself when a
// Run made with it reaches p. Use it in a child process (see [Start]).
func KillAt(ctx context.Context, p Point) context.Context {
	return idemstore.WithTrace(ctx, &idemstore.Trace{Checkpoint: func(_ context.Context, at Point, _ idem.Key) error {
		if at == p {
			Kill()
		}
		return nil
	}})
}

// Kill SIGKILLs this process: no deferred function runs, no buffer is
// flushed, no lock is released other than by the kernel. Windows has no
// signals: there it ends the process with TerminateProcess and exit code
// 137, which [Child.Wait] reports as Killed.
func Kill() {
	proc.KillSelf()
	select {} // the signal is on its way
}

// CrashWhen is CrashAt with a condition: the run crashes at the first
// point for which when returns true.
// The condition is called from every goroutine the run uses (Each's
// workers), one call at a time.
func CrashWhen(ctx context.Context, when func(p Point, key idem.Key) bool) context.Context {
	var mu sync.Mutex
	crashed := false
	return idemstore.WithTrace(ctx, &idemstore.Trace{Checkpoint: func(_ context.Context, at Point, k idem.Key) error {
		mu.Lock()
		defer mu.Unlock()
		if crashed || !when(at, k) {
			return nil
		}
		crashed = true
		return ErrCrashed
	}})
}

// KillWhen is KillAt with a condition: the process SIGKILLs itself at the
// first point for which when returns true (say, the after-fn point of the
// third period of a catch-up).
func KillWhen(ctx context.Context, when func(p Point, key idem.Key) bool) context.Context {
	return idemstore.WithTrace(ctx, &idemstore.Trace{Checkpoint: func(_ context.Context, at Point, k idem.Key) error {
		if when(at, k) {
			Kill()
		}
		return nil
	}})
}
