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
func WithLockWait(d time.Duration) StoreOption {
	return storeOnlyOption(func(c *config) error {
		if d <= 0 {
			return invalidOption("WithLockWait(%v): must be positive", d)
		}
		c.lockWait = d
		return nil
	})
}

type storeOnlyOption func(*config) error

func (o storeOnlyOption) applyStore(c *config) error { return o(c) }

// writeLock is the ledger's way to its write lock. In this process the
// writers queue on sem, first come first served (a channel's waiting
// senders are served in order), with the wait bounded. Across processes an
// owned ledger tries BEGIN IMMEDIATE without SQLite's busy handler and polls
// itself: SQLite's handler sleeps longer the longer a writer has waited (up
// to 100 ms between tries), so that a writer that has waited long loses
// every race to the ones that just came, and may wait for seconds behind a
// steady stream of other processes' writes. Here it is the reverse: the
// longer a writer has waited, the more often it tries.
type writeLock struct {
	sem     chan struct{}
	wait    time.Duration // the bound of each write's wait
	waiters atomic.Int32  // writes waiting for the lock now (for tests)
}

// pollWait is how long a writer that has waited w sleeps before it tries
// BEGIN IMMEDIATE again: a few milliseconds at first, and less as w grows,
// so that a writer that has waited long takes the lock before one that
// just came (with jitter, so that pollers do not march in step).
func pollWait(w time.Duration) time.Duration {
	var d time.Duration
	switch {
	case w < 20*time.Millisecond:
		d = 2 * time.Millisecond
	case w < 200*time.Millisecond:
		d = time.Millisecond
	case w < time.Second:
		d = 500 * time.Microsecond
	default:
		d = 200 * time.Microsecond
	}
	return d/2 + rand.N(d)
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
	select {
	case wl.sem <- struct{}{}:
		return false, nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case wl.sem <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return true, context.Cause(ctx)
	case <-t.C:
		return true, lockHeld(time.Since(start), nil)
	}
}

func (wl *writeLock) release() { <-wl.sem }
