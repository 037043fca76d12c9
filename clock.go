package idem

import (
	"context"
	"time"
)

// Clock is the source of time for leases, backoff and waits. The default is
// the system clock; tests pass a fake one (idemtest.Clock) with [WithClock]
// so that leases expire and backoffs elapse without real sleeping.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has elapsed on this clock.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the clock of every call not given [WithClock]: the
// system's time (time.Now, time.After). A relay on it ends a delivery's
// context with the delivery's lease; compare a Clock with it to tell.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// sleep waits d on c, or until ctx ends.
func sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.After(d):
		return nil
	}
}
