package idemtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// Crash is one crash scenario of [EveryCrashPoint]: the job's first run is
// stopped at Point, as a SIGKILL would stop it, and a second run recovers.
type Crash struct {
	Point Point
	Clock *Clock // the fake clock the job's Runs must use: pass Option() to them

	t *testing.T // EveryCrashPoint's subtest, skipped when the point is not reached
}

// Option returns the option that makes a Run use the scenario's clock.
func (c *Crash) Option() idem.Option { return idem.WithClock(c.Clock) }

// Crash runs job with every Run in it stopped at c.Point. It reports
// whether the point was reached (a store may not have it: a ledger has no
// mid-write point), and returns job's error if it failed otherwise.
//
// Under [EveryCrashPoint], a point that job ran through without reaching
// it (job returned nil) skips the subtest, saying so, instead of letting a
// scenario that tested nothing pass: Crash does not return then.
func (c *Crash) Crash(job func(ctx context.Context) error) (reached bool, err error) {
	err = job(CrashAt(context.Background(), c.Point))
	if errors.Is(err, ErrCrashed) {
		return true, nil
	}
	if err == nil && c.t != nil {
		c.t.Skipf("the job never reached crash point %s (its store has no such point: a SQLite ledger, say, has no %s or %s)",
			c.Point, MidWrite, AfterRename)
	}
	return false, err
}

// Recover moves the clock past every lease and runs job again, as the next
// trigger after the crash would.
func (c *Crash) Recover(job func(ctx context.Context) error) error {
	c.Clock.Advance(idem.DefaultLease + time.Second)
	return job(context.Background())
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
