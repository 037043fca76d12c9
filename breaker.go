package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/internal/breaker"
)

// itemBreaker is a fan-out's breaker (a Breaker's, WithBreaker)
// as the item engine drives it.
type itemBreaker struct{ b *breaker.Breaker }

// open returns the deferral of a breaker that is open at now, or nil.
func (b *itemBreaker) open(now time.Time) *Deferral {
	if open, until := b.b.IsOpen(now); open {
		return &Deferral{Reason: ReasonBreaker, Until: until}
	}
	return nil
}

// acquire lets one item run: it returns the probe's number (not 0) when
// the item is the half-open breaker's probe, or the deferral of an open
// breaker; it waits for another item's probe to end.
func (b *itemBreaker) acquire(ctx context.Context, clock Clock) (probe uint64, d *Deferral, err error) {
	probe, open, until, err := b.b.Acquire(ctx, clock.Now)
	if open {
		return 0, &Deferral{Reason: ReasonBreaker, Until: until}, err
	}
	return probe, nil, err
}

// done records how an item that acquire let run ended: err is fn's error.
// What counts as a failure: an error of fn, except a Permanent one (the
// item's own fault), the end of the call's context and a lost lease.
func (b *itemBreaker) done(ctx context.Context, now time.Time, probe uint64, err error) {
	failed := err != nil && !IsPermanent(err) && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost)
	b.b.Done(now, probe, err == nil, failed)
}

// cancel ends the probe numbered probe if it did not run.
func (b *itemBreaker) cancel(probe uint64) { b.b.Cancel(probe) }

// ReasonBreaker is [Deferral].Reason when an open [Breaker] deferred
// the call.
const ReasonBreaker = "breaker"

// Breaker is a circuit breaker on fn's errors, for Each and EachTx
// (WithBreaker): after Failures consecutive failures of fn it opens for
// CoolDown, and a call that finds it open is deferred ([ErrDeferred]): it
// claims nothing, and a call that is running stops claiming, so that a
// downstream outage does not make every item fail, back off and park.
// After the cool-down it is half-open: one item runs as a probe while the
// other workers wait for it; success closes the breaker, failure opens it
// for another cool-down.
//
// What counts as a failure: an error of fn, except an [Permanent] one (the
// item's own fault: it parks as without a breaker) and the end of the
// call's context. Items that failed before the breaker opened keep their
// failure (they back off as usual): at most Failures of them in a row, plus
// one for each other worker whose item was running when it opened.
//
// A Breaker keeps its state in memory, for the process: give the same one
// to every call of a job (every trigger), so that the next trigger finds it
// open or probing. It takes time from the call's clock ([WithClock]). Safe
// for concurrent use; the zero Breaker is not usable, call NewBreaker.
//
// Why not sony/gobreaker: the core module depends only on SQLite, renameio
// and golang.org/x, and gobreaker reads the wall clock (time.Now) where
// idem's tests need the call's clock. This one is the part Each needs:
// consecutive failures, cool-down, one probe.
type Breaker struct {
	b *breaker.Breaker
}

// BreakerState is a Breaker's state.
type BreakerState int

// The states of a Breaker.
const (
	BreakerClosed   BreakerState = iota // items run
	BreakerOpen                         // calls are deferred until the cool-down ends
	BreakerHalfOpen                     // the cool-down ended: the next item is a probe
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// NewBreaker returns a closed Breaker that opens after failures consecutive
// failures, for coolDown. A failures below 1 or a coolDown not above 0 makes
// WithBreaker fail with [ErrInvalidOption].
func NewBreaker(failures int, coolDown time.Duration) *Breaker {
	return &Breaker{&breaker.Breaker{Failures: failures, CoolDown: coolDown}}
}

// State returns the breaker's state at now, and when an open one lets a
// probe through.
func (b *Breaker) State(now time.Time) (BreakerState, time.Time) {
	s, until := b.b.State(now)
	return BreakerState(s), until
}
