package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// A Limiter is a limit that calls share, across the processes and hosts
// of one store: package limit's *Rate (paces starts) and *AtOnce (caps
// the runs at once). [WithLimits] makes a call wait for its limiters
// before it claims work.
type Limiter interface {
	// Name names the limit in errors, logs and Deferral.Reason.
	Name() string
	// TakeN waits until n more starts may go (a rate; at once for an "at
	// once" limit). They must go by the time it returns (by this
	// process's clock; zero: whenever), or they are void.
	TakeN(ctx context.Context, n int) (by time.Time, err error)
	// Hold takes a place of an "at once" limit for the run (at once for a
	// rate): the context it returns ends when the place is lost, and
	// release gives it back.
	Hold(ctx context.Context) (held context.Context, release func(), err error)
}

// WithLimits makes a call wait for the limits ls before it runs: Run and
// RunTx before their claim, a catch-up's periods each, Each and EachTx
// each item's start (a rate) and the whole call (an "at once" limit), a
// Scheduler's job each period; as a store default, every call on the
// store (package limit says what each call takes). A nil limit is an
// error matching [ErrInvalidOption].
func WithLimits(ls ...Limiter) Option {
	return newOption("WithLimits", classCommon, func(c *config) error {
		for i, l := range ls {
			if l == nil {
				return invalidOption("WithLimits: limit %d of %d is nil: not a limit", i+1, len(ls))
			}
		}
		c.limits = append(c.limits[:len(c.limits):len(c.limits)], ls...)
		return nil
	})
}

// holdLimits waits for the call's limits before a run of key claims it:
// each rate lets one more start go, each "at once" limit gives a place,
// held until release. A key that is settled already (done, parked) takes
// nothing: its Run claims nothing either. A limit that cannot be taken
// (its store failed, ctx ended while waiting) defers the run, as a guard
// would: nothing was claimed. The starts taken are in the context it
// returns, for startLimits.
func holdLimits(ctx context.Context, s idemstore.Store, key Key, ls []Limiter) (context.Context, func(), *Deferral) {
	if len(ls) == 0 {
		return ctx, func() {}, nil
	}
	if rec, ok, err := s.Lookup(ctx, key); err == nil && ok && (rec.Status == StatusDone || rec.Status == StatusParked) {
		return withStarts(ctx, ls, nil), func() {}, nil
	}
	return takeLimits(ctx, ls, 1)
}

// takeLimits takes n starts of every rate in ls and a place of every "at
// once" limit (see holdLimits).
func takeLimits(ctx context.Context, ls []Limiter, n int) (context.Context, func(), *Deferral) {
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	var bys []time.Time
	for _, l := range ls {
		if n > 0 {
			by, err := l.TakeN(ctx, n)
			if err != nil {
				release()
				return ctx, func() {}, limitDeferral(l, err)
			}
			bys = append(bys, by)
		}
		held, rel, err := l.Hold(ctx)
		if err != nil {
			release()
			return ctx, func() {}, limitDeferral(l, err)
		}
		ctx = held
		releases = append(releases, rel)
	}
	if n == 1 {
		ctx = withStarts(ctx, ls, bys)
	}
	return ctx, release, nil
}

func limitDeferral(l Limiter, err error) *Deferral {
	return &Deferral{Reason: "limit " + l.Name(), Err: err}
}

// paceLimits takes n starts of every rate in ls, for items of Each. They
// must go by the time it returns (zero: whenever).
func paceLimits(ctx context.Context, ls []Limiter, n int) (by time.Time, err error) {
	for _, l := range ls {
		b, err := l.TakeN(ctx, n)
		if err != nil {
			return by, fmt.Errorf("limit %s: %w", l.Name(), err)
		}
		if !b.IsZero() && (by.IsZero() || b.Before(by)) {
			by = b
		}
	}
	return by, nil
}

// errStartLate is why fn did not start: the start its rate reserved went
// void (it could not go in time) where the run cannot wait for another (in
// the store's transaction).
var errStartLate = errors.New("idem: the start reserved by a rate limit went void before fn could start (the store or the process stalled); nothing ran")

// starts are the starts of a run's rates (one each), taken before its
// claim and used when fn starts: a start that cannot go in time (the
// claim stalled: a store outage) is void, and a rate's start is used by
// one start of fn. Each limit's start is void after its by (zero:
// whenever; an "at once" limit's).
type starts struct {
	ls   []Limiter
	by   []time.Time
	used bool // taken by a start of fn; the next needs new ones
}

type startsKey struct{}

// withStarts returns ctx with the starts of ls, which must go by bys (nil:
// none taken yet).
func withStarts(ctx context.Context, ls []Limiter, bys []time.Time) context.Context {
	st := &starts{ls: ls, by: bys, used: bys == nil}
	return context.WithValue(ctx, startsKey{}, st)
}

// ready waits until every limit of the run lets fn start: its start
// taken before, if that may still go, else a new one. It does not use
// them (see use).
func (st *starts) ready(ctx context.Context) error {
	if st == nil {
		return nil
	}
	for {
		if st.used {
			st.by, st.used = make([]time.Time, len(st.ls)), false
			for i := range st.by {
				st.by[i] = time.Unix(0, 1) // void: take one
			}
		}
		again := false
		for i, l := range st.ls {
			if st.by[i].IsZero() || !time.Now().After(st.by[i]) {
				continue
			}
			by, err := l.TakeN(ctx, 1)
			if err != nil {
				return fmt.Errorf("limit %s: %w", l.Name(), err)
			}
			st.by[i], again = by, true
		}
		if !again {
			return nil
		}
		// A wait for one limit may have made the start of another void:
		// look at all of them again.
	}
}

// use uses the starts as fn starts now: errStartLate if one is void or
// used already.
func (st *starts) use() error {
	if st == nil {
		return nil
	}
	now := time.Now()
	for _, by := range st.by {
		if st.used || !by.IsZero() && now.After(by) {
			return errStartLate
		}
	}
	st.used = true
	return nil
}

// startLimits waits for ctx's starts (ready) and uses them: fn starts
// right after it returns nil.
func startLimits(ctx context.Context) error {
	st, _ := ctx.Value(startsKey{}).(*starts)
	for {
		if err := st.ready(ctx); err != nil {
			return err
		}
		if st.use() == nil {
			return nil
		}
	}
}

// readyLimits waits for ctx's starts (ready) without using them.
func readyLimits(ctx context.Context) error {
	st, _ := ctx.Value(startsKey{}).(*starts)
	return st.ready(ctx)
}

// useLimits uses ctx's starts without waiting (in a store's transaction,
// right before fn): errStartLate if one is void.
func useLimits(ctx context.Context) error {
	st, _ := ctx.Value(startsKey{}).(*starts)
	return st.use()
}
