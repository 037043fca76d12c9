package idem

import (
	"context"
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// limiter is a limit of package limit (limit.With), as the engine uses it:
// a rate that paces starts, or an "at once" limit whose place a run holds
// while it runs.
type limiter interface {
	LimitName() string
	// TakeN waits until n more starts may go (a rate; at once for an "at
	// once" limit).
	TakeN(ctx context.Context, n int) error
	// Hold takes a place of an "at once" limit for the run (at once for a
	// rate): the context it returns ends when the place is lost, and
	// release gives it back.
	Hold(ctx context.Context) (held context.Context, release func(), err error)
}

// withLimits is limit.With (see there), through hooks.
func withLimits(ls []any) Option {
	return newOption("limit.With", classCommon, func(c *config) error {
		for _, l := range ls {
			lim, ok := l.(limiter)
			if !ok || lim == nil {
				return invalidOption("limit.With(%T): not a limit of package limit", l)
			}
			c.limits = append(c.limits[:len(c.limits):len(c.limits)], lim)
		}
		return nil
	})
}

// holdLimits waits for the call's limits before a run of key claims it:
// each rate lets one more start go, each "at once" limit gives a place,
// held until release. A key that is settled already (done, parked) takes
// nothing: its Run claims nothing either. A limit that cannot be taken
// (its store failed, ctx ended while waiting) defers the run, as a guard
// would: nothing was claimed.
func holdLimits(ctx context.Context, s idemstore.Store, key Key, ls []limiter) (context.Context, func(), *Deferral) {
	if len(ls) == 0 {
		return ctx, func() {}, nil
	}
	if rec, ok, err := s.Lookup(ctx, key); err == nil && ok && (rec.Status == StatusDone || rec.Status == StatusParked) {
		return ctx, func() {}, nil
	}
	return takeLimits(ctx, ls, 1)
}

// takeLimits takes n starts of every rate in ls and a place of every "at
// once" limit (see holdLimits).
func takeLimits(ctx context.Context, ls []limiter, n int) (context.Context, func(), *Deferral) {
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for _, l := range ls {
		if n > 0 {
			if err := l.TakeN(ctx, n); err != nil {
				release()
				return ctx, func() {}, limitDeferral(l, err)
			}
		}
		held, rel, err := l.Hold(ctx)
		if err != nil {
			release()
			return ctx, func() {}, limitDeferral(l, err)
		}
		ctx = held
		releases = append(releases, rel)
	}
	return ctx, release, nil
}

func limitDeferral(l limiter, err error) *Deferral {
	return &Deferral{Reason: "limit " + l.LimitName(), Err: err}
}

// paceLimits takes n starts of every rate in ls, for items of Each.
func paceLimits(ctx context.Context, ls []limiter, n int) error {
	for _, l := range ls {
		if err := l.TakeN(ctx, n); err != nil {
			return fmt.Errorf("limit %s: %w", l.LimitName(), err)
		}
	}
	return nil
}
