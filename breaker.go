package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemgo/idem/internal/breaker"
)

// reasonBreaker is Deferral.Reason when an open breaker deferred the call
// (guard.ReasonBreaker).
const reasonBreaker = "breaker"

// itemBreaker is a fan-out's breaker (guard.Breaker's, fanout.WithBreaker)
// as the item engine drives it.
type itemBreaker struct{ b *breaker.Breaker }

// open returns the deferral of a breaker that is open at now, or nil.
func (b *itemBreaker) open(now time.Time) *Deferral {
	if open, until := b.b.IsOpen(now); open {
		return &Deferral{Reason: reasonBreaker, Until: until}
	}
	return nil
}

// acquire lets one item run: it returns the probe's number (not 0) when
// the item is the half-open breaker's probe, or the deferral of an open
// breaker; it waits for another item's probe to end.
func (b *itemBreaker) acquire(ctx context.Context, clock Clock) (probe uint64, d *Deferral, err error) {
	probe, open, until, err := b.b.Acquire(ctx, clock.Now)
	if open {
		return 0, &Deferral{Reason: reasonBreaker, Until: until}, err
	}
	return probe, nil, err
}

// done records how an item that acquire let run ended: err is fn's error.
// What counts as a failure: an error of fn, except a Permanent one (the
// item's own fault), the end of the call's context and a lost lease.
func (b *itemBreaker) done(ctx context.Context, now time.Time, probe uint64, err error) {
	failed := err != nil && !isPermanent(err) && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost)
	b.b.Done(now, probe, err == nil, failed)
}

// cancel ends the probe numbered probe if it did not run.
func (b *itemBreaker) cancel(probe uint64) { b.b.Cancel(probe) }
