package idemtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
	"github.com/idemgo/idem/internal/runctx"
)

// Crash is one crash scenario of [EveryCrashPoint]: the job's first run is
// stopped at Point, as a SIGKILL would stop it, and a second run recovers.
//
// It works alike on every store: one on the engine's clock (the SQLite
// ledger, the state file) and one on its server's (pgledger, redisstore).
// The crashed run claims as an owner of its own, a process that Crash
// declares ended once the job has returned: [idemstore.HolderGone] reports
// it so, in this process, and the recovery's claim takes the crashed
// attempt over at once, whatever its lease ([idem.WithLease]) and whoever
// keeps the time, exactly as the next run on the host takes over the
// attempt of a process that SIGKILL ended (the claim is in doubt, the
// abandoned attempt counts as a failure, its LastError says its process
// died: [idemstore.NoteDied]). The state file, whose lock dies with its
// holder, takes it over by its lock. A store of your own takes it over so
// if its Claim applies [idemstore.Decide] (or calls HolderGone) as the
// Store interface asks; one that does not finds the lease held until it
// expires.
//
// Crash and Recover each run the job as one trigger: a call in it (Run,
// RunTx, CatchUp, CatchUpTx) that is not given [idem.RetryWithin] makes
// one attempt, as with [idem.OneAttempt] (with [idem.WaitForTurn] too,
// which otherwise retries until ctx ends). A job whose fn fails returns its
// error at once (matching idem.ErrBackingOff, or idem.ErrParked, and
// wrapping fn's) instead of retrying in-process for
// [idem.DefaultRetryWithin]: a minute of real time, or forever on a clock
// that nothing moves. What the job waits for by its own options still
// waits on its clock: WaitForTurn for a key that backs off after a
// failure, Each for its items' backoffs; move Clock yourself there.
type Crash struct {
	Point Point
	Clock *Clock // the fake clock the job's Runs should use: pass Option() to them

	t *testing.T // EveryCrashPoint's subtest, skipped when the point is not reached
}

// Option returns the option that makes a Run use the scenario's clock.
// Crash and Recover work without it too, on the system clock.
func (c *Crash) Option() idem.Option { return idem.WithClock(c.Clock) }

// Crash runs job with every Run in it stopped at c.Point. It reports
// whether the point was reached (a store may not have it: a ledger has no
// mid-write point), and returns job's error if it failed otherwise.
//
// The attempt it stopped stays as a SIGKILL leaves it: its record is
// running, its lease is not released. Its owner is one of its own, which
// Crash declares ended when job returns (see [Crash]). Every Run in job
// must have returned by then.
//
// Under [EveryCrashPoint], a point that job ran through without reaching
// it (job returned nil) skips the subtest, saying so, instead of letting a
// scenario that tested nothing pass: Crash does not return then.
func (c *Crash) Crash(job func(ctx context.Context) error) (reached bool, err error) {
	owner := holder.Stand()
	err = job(runctx.WithOneAttempt(runctx.WithOwner(CrashAt(context.Background(), c.Point), owner)))
	holder.End(owner) // the crashed run's process is gone: its attempt is abandoned
	if errors.Is(err, ErrCrashed) {
		return true, nil
	}
	if err == nil && c.t != nil {
		c.t.Skipf("the job never reached crash point %s (its store has no such point: a SQLite ledger, say, has no %s or %s)",
			c.Point, MidWrite, AfterRename)
	}
	return false, err
}

// Recover runs job again, as the next trigger after the crash would: its
// claim takes over the attempt that Crash stopped at once (its holder is
// gone), on every store and whatever the job's lease. It does not move
// Clock.
func (c *Crash) Recover(job func(ctx context.Context) error) error {
	return job(runctx.WithOneAttempt(context.Background()))
}

// EachCrashPoint calls scenario once for every crash point (idemstore.Points),
// each with a new Crash and a new clock. The scenario builds a fresh store
// and downstream, calls Crash and Recover with its job, and returns an error
// if its own invariant ("the mail went out exactly once") does not hold.
// EachCrashPoint returns the scenarios' errors, each naming its point.
func EachCrashPoint(scenario func(c *Crash) error) error {
	var errs []error
	for _, p := range idemstore.Points() {
		c := &Crash{Point: p, Clock: NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))}
		if err := scenario(c); err != nil {
			errs = append(errs, fmt.Errorf("crash at %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// EveryCrashPoint is EachCrashPoint as subtests of t, one per point. A
// subtest whose job never reaches its point is skipped (see [Crash.Crash]),
// so `go test -v` shows which points the job's store has.
func EveryCrashPoint(t *testing.T, scenario func(t *testing.T, c *Crash)) {
	for _, p := range idemstore.Points() {
		t.Run(string(p), func(t *testing.T) {
			scenario(t, &Crash{Point: p, Clock: NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC)), t: t})
		})
	}
}
