package idem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// ErrWriteLockHeld: a write of a SQLite ledger (a claim, a lease renewal, a
// done mark, an outbox message's claim or end, ...) waited longer than
// [WithLockWait] for the database's write lock, which another writer held
// (a long transaction of the application's on a database shared through
// [NewLedger], a backup, a migration, another process's writes). Nothing was
// written. It is transient: the key is as it was, and the next try may
// succeed. The error names the ledger's path and how long it waited.
var ErrWriteLockHeld = errors.New("idem: ledger write lock held by another writer")

// DefaultLockWait is how long a write of a SQLite ledger waits for the
// database's write lock before it fails with [ErrWriteLockHeld] (see
// [WithLockWait]).
const DefaultLockWait = 30 * time.Second

// WithLockWait bounds how long each write of a SQLite ledger ([OpenLedger],
// [NewLedger]) waits for the database's write lock (default
// [DefaultLockWait]); past it, the write fails with an error matching
// [ErrWriteLockHeld] that names the ledger, and writes nothing. The
// context's end bounds the wait too. A d that is not positive is an error
// matching [ErrInvalidOption]. Other stores ignore it.
//
// On an attached database ([NewLedger]) the bound is checked between the
// tries of a BEGIN, each of which may itself wait up to the database's
// busy_timeout.
func WithLockWait(d time.Duration) Option {
	return newOption("WithLockWait", classStore, func(c *config) error {
		if d <= 0 {
			return invalidOption("WithLockWait(%v): must be positive", d)
		}
		c.lockWait = d
		return nil
	})
}

// writeLock is the ledger's way to its write lock. In this process the
// writers queue on sem, first come first served (a channel's waiting
// senders are served in order), with the wait bounded; across processes
// the writers of an owned ledger queue in its lock file (q, see
// ledger_queue.go), and each then waits for SQLite's lock in SQLite's busy
// handler (where another program may hold it), bounded too.
type writeLock struct {
	sem     chan struct{}
	q       *writeQueue // nil: none (an attached ledger, or no queue on this system)
	qs      queueState
	wait    time.Duration // the bound of each write's wait
	blocked atomic.Int32  // writes that found the database locked and wait for SQLite's lock now (for tests)
	// long counts this process's writes that run a caller's function in
	// their transaction (withSQLTx on an owned ledger), holding or
	// waiting for their turn.
	long atomic.Int32
}

// pollWait is how long a write that found the database locked (and
// SQLite's busy handler did not wait) sleeps before it tries again.
func pollWait(time.Duration) time.Duration {
	return 500*time.Microsecond + rand.N(2*time.Millisecond)
}

// lockHeld is the error of a write that waited d for the write lock.
func lockHeld(d time.Duration, why error) error {
	msg := fmt.Sprintf("waited %v for the database's write lock, which another writer held (see WithLockWait); nothing was written", d.Round(time.Millisecond))
	if why != nil {
		return fmt.Errorf("%w: %s (last try: %w)", ErrWriteLockHeld, msg, why)
	}
	return fmt.Errorf("%w: %s", ErrWriteLockHeld, msg)
}

// acquire takes this process's turn to write, waiting at most until
// deadline or ctx's end; waited says whether it had to wait. release gives
// it back.
func (wl *writeLock) acquire(ctx context.Context, start, deadline time.Time) (waited bool, err error) {
	if wl.tryAcquire() {
		return false, nil
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	wl.waiting(1)
	select {
	case wl.sem <- struct{}{}:
		wl.waiting(-1)
		return true, nil
	case <-ctx.Done():
		wl.gaveUp()
		return true, context.Cause(ctx)
	case <-t.C:
		wl.gaveUp()
		return true, lockHeld(time.Since(start), nil)
	}
}

// tryAcquire takes this process's turn to write if it is free now.
func (wl *writeLock) tryAcquire() bool {
	select {
	case wl.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// release gives this process's turn back, and the ledger's turn in the
// write queue if it holds it (or keeps that for the next write waiting
// here: releaseTurn).
func (wl *writeLock) release() {
	if wl.q != nil {
		wl.releaseTurn()
		return
	}
	<-wl.sem
}
