package idem

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// A Guard tells whether this host can take more work now: the memory in
// use, the free disk, a downstream's health, or anything else. Calls given
// one with [WithGuard] ask it before they claim work (Run before its
// claim; Each and EachTx before each claim and before each window of items
// is marked started), and a guard that says no DEFERS the call: it stops
// claiming, leaves the work it did not start unclaimed (no attempt, no
// failure, nothing parked), and returns an error matching [ErrDeferred]
// whose *[Deferral] names the guard. The next trigger tries again.
//
// A Guard says why it refused in its error; an error in taking its measure
// (a file it cannot read) refuses too: when the host's state is unknown,
// the safe answer is not to push through. Check must be quick (it runs
// before every window) and safe for concurrent use.
//
// Check's context tells the key it guards: [InfoFrom] gives an Info with
// Key set (a period, for Each too; no attempt is claimed yet, so nothing
// else is), for a check that depends on the period — a job that must not
// run on a holiday, say.
type Guard interface {
	// Name names the guard in logs, in [Deferral.Reason] and in metric
	// labels: "memory", "disk", or the name given to guard.Func.
	Name() string
	// Check returns nil when work may go on, or why not.
	Check(ctx context.Context) error
}

// Deferral says why a call was deferred: what [errors.As] finds in an
// error matching [ErrDeferred].
type Deferral struct {
	Reason string    // the guard's Name, "breaker", or "limit " and a shared limit's name (package limit)
	Until  time.Time // an open breaker: when it lets a probe through; zero for a guard
	Err    error     // what the guard said; nil for a breaker
}

func (d *Deferral) Error() string {
	if d.Reason == ReasonBreaker {
		return "breaker open until " + d.Until.UTC().Format(time.RFC3339Nano)
	}
	msg := "guard " + d.Reason
	if strings.HasPrefix(d.Reason, "limit ") {
		msg = d.Reason
	}
	if d.Err != nil {
		msg += ": " + d.Err.Error()
	}
	return msg
}

// Unwrap returns the guard's error.
func (d *Deferral) Unwrap() error { return d.Err }

// storeGuard is a Guard that depends on the call's store (package guard's
// DiskGuard with no Path watches the store's file): a call asks ForStore
// for the guard to check instead.
type storeGuard interface {
	ForStore(s idemstore.Store) (Guard, error)
}

// validGuard is a Guard that can tell it cannot be used (package guard's
// MemoryGuard with a Limit that is not a fraction): WithGuard refuses it.
type validGuard interface {
	Validate() error
}

// bindGuards returns gs for a call on store s: each storeGuard is replaced
// by the guard it makes for s.
func bindGuards(gs []Guard, s idemstore.Store) ([]Guard, error) {
	var out []Guard
	for i, g := range gs {
		sg, ok := g.(storeGuard)
		if !ok {
			continue
		}
		b, err := sg.ForStore(s)
		if err != nil {
			return nil, invalidOption("WithGuard(%s)", err)
		}
		if out == nil {
			out = append([]Guard(nil), gs...)
		}
		out[i] = b
	}
	if out == nil {
		return gs, nil
	}
	return out, nil
}

// checkGuards asks gs in order and returns the first refusal, logged.
func checkGuards(ctx context.Context, gs []Guard, logger *slog.Logger, key Key) *Deferral {
	if len(gs) == 0 {
		return nil
	}
	gctx := context.WithValue(ctx, infoKey{}, Info{Key: key}) // the key it guards, for Check
	for _, g := range gs {
		if err := g.Check(gctx); err != nil {
			d := &Deferral{Reason: g.Name(), Err: err}
			logDeferral(ctx, logger, key, d)
			return d
		}
	}
	return nil
}

func logDeferral(ctx context.Context, logger *slog.Logger, key Key, d *Deferral) {
	if logger == nil {
		return
	}
	logger.LogAttrs(ctx, slog.LevelWarn, "idem: deferred", slog.String("job", key.Job), slog.String("period", key.Period),
		slog.String("reason", d.Reason), slog.String("why", d.Error()))
}
