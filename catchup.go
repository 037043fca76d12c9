package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// DefaultMaxPeriods is how many due periods one CatchUp runs at most, unless
// [CatchUpAll] says otherwise: an explicit version of Kubernetes' "100
// missed start times" rule, except that the rest is not dropped but left
// for the next call.
const DefaultMaxPeriods = 100

type catchUpConfig struct {
	latest     bool
	maxPeriods int
	since      time.Time
	dueAtStart bool
	keepGoing  bool
	onPeriod   func(PeriodResult)
	delay      time.Duration // DueAfter
	window     time.Duration // CatchUpWindow: periods due longer ago are recorded skipped
	cursor     bool          // internal: the done mark advances the job's cursor
	stop       func() bool   // internal: a Scheduler shutting down; no further period starts
	// internal: a Scheduler's look, not a trigger of its periods: with
	// nothing due it checks nothing, and a period settled (done or
	// skipped) with other parameters is passed over as done.
	scheduled bool
	// internal: told the job's cursor as the catch-up reads it and moves
	// it (a Scheduler's lag does not wait for the catch-up to return).
	progress func(cursor string)
}

// PeriodResult is what catch-up did with one period.
type PeriodResult struct {
	Period  Period
	Outcome Outcome // Ran, AlreadyDone, Recovered, Skipped, or the failure's outcome
	Err     error   // nil unless the period failed
}

// CatchUpResult reports a CatchUp call.
type CatchUpResult struct {
	Periods  []PeriodResult // in order, oldest first
	Deferred int            // due periods left for a later call (the MaxPeriods cap, or a stop at a failure)
	Cursor   string         // the job's cursor afterwards
}

// Count returns how many periods ended with outcome o.
func (r CatchUpResult) Count(o Outcome) int {
	n := 0
	for _, p := range r.Periods {
		if p.Outcome == o {
			n++
		}
	}
	return n
}

// CatchUp does every due period of job that is not done yet, oldest first,
// each through Run (so each is idempotent on its own), up to now on the
// clock ([WithClock]). It is what a job triggered by cron or a timer calls
// instead of Run: after downtime, the missed periods get done.
//
// Which periods: those after the job's cursor (the last period catch-up settled
// in order) up to the latest due one. A job with no cursor yet starts at
// [Since], or else with the latest due period only: its first call records that
// start as the job's cursor ([idemstore.CatchUpStore.Start], the period before
// the first) before any period runs. So a first period that fails is not
// skipped: every later call starts at it, whatever its clock says, and the
// periods after it wait for it (or run, with [ContinueAfterFailure]). Periods
// at or before the job's retention horizon count as done. A period is due when
// it ends, or when it starts with [DueAtStart].
//
// Catch-up never goes back before the job's cursor: a period at or before
// it that is not settled (run by a plain Run, or left by an older version
// of idem whose catch-up could skip it) is not reached by CatchUp again;
// run it with Run, or Resolve it.
//
// Policies: [CatchUpAll] (default; capped at DefaultMaxPeriods per call) or
// [CatchUpLatest]. A failing period stops the catch-up there unless
// [ContinueAfterFailure]; the error returned is that period's.
//
// The cursor advances in the same transaction as each period's done mark,
// and only over an unbroken run of settled periods; it never moves back. A
// wall clock that jumps back therefore re-runs nothing; one that jumps
// forward makes the periods in between due, under the policy.
//
// Other options (mode, backoff, logger, ...) apply to every period's Run;
// [RetryWithin] bounds the in-process retries of the whole call, counted
// from its start. An observer ([OnResult]) gets one Result per period
// handled, skipped periods included; the call's result is CatchUpResult.
//
// fn must not call Run or RunTx for its own period (the key is held by
// the Run that called fn: [ErrNestedRun]); for business writes that commit
// with each period's done mark, use [CatchUpTx].
func CatchUp(ctx context.Context, s idemstore.CatchUpStore, job string, sched Schedule, fn func(ctx context.Context, p Period) error, opts ...Option) (CatchUpResult, error) {
	if fn == nil || sched == nil || s == nil {
		panic("idem: CatchUp needs a store, a schedule and a fn")
	}
	cfg := configure(s, callCatchUp, opts)
	return catchUp(ctx, s, job, sched, cfg, func(ctx context.Context, key Key, p Period, cfg *config) error {
		return execute(ctx, s, key, cfg, noValue(func(ctx context.Context) error { return fn(ctx, p) }), nil, nil)
	})
}

// CatchUpTx is [CatchUp] for a transactional job: each due period runs
// through [RunTx], and fn's writes, the period's done mark and the
// move of the job's cursor to the period commit in ONE transaction of the
// store's database, or not at all. After downtime every missed period is
// done exactly once in that database, whatever kills the process: a
// period whose transaction did not commit left neither business rows nor
// a done mark nor a cursor move, and the next call runs it again.
//
// Periods, policies, the cursor and the options are as in CatchUp; it
// takes no mode option, and ignores a store's default mode (see RunTx). A failing period's writes are
// rolled back and the catch-up stops there (unless
// [ContinueAfterFailure]); the error returned is that period's. As in
// RunTx, write idempotent, recomputing statements: they are what the
// re-run of a rolled-back period repeats.
func CatchUpTx[Tx any](ctx context.Context, s idemstore.CatchUpTxStore[Tx], job string, sched Schedule, fn func(ctx context.Context, tx Tx, p Period) error, opts ...Option) (CatchUpResult, error) {
	if fn == nil || sched == nil || s == nil {
		panic("idem: CatchUpTx needs a store, a schedule and a fn")
	}
	cfg := configure(s, callCatchUpTx, opts)
	return catchUp(ctx, s, job, sched, cfg, func(ctx context.Context, key Key, p Period, cfg *config) error {
		return runTx(ctx, s, key, func(ctx context.Context, tx Tx) ([]byte, error) { return nil, fn(ctx, tx, p) }, cfg)
	})
}

// catchUp is CatchUp's loop; run runs one period with the config cfg.
func catchUp(ctx context.Context, s idemstore.CatchUpStore, job string, sched Schedule, cfg *config,
	run func(ctx context.Context, key Key, p Period, cfg *config) error) (CatchUpResult, error) {
	cu := cfg.catchUp
	var res CatchUpResult
	if cfg.err != nil {
		return res, cfg.err
	}
	if err := idemstore.ValidateJob(job); err != nil {
		return res, err
	}
	js, err := s.Job(ctx, job)
	if err != nil {
		return res, err
	}

	now := cfg.clock.Now()
	last := cu.lastDue(sched, now)
	if js.Cursor == "" {
		// The job's first catch-up: record where it starts before any
		// period runs, so that a first period that fails is where the
		// next call starts too.
		first := last
		if !cu.since.IsZero() {
			first = sched.At(cu.since)
		}
		if js, err = s.Start(ctx, job, sched.Prev(first).Name); err != nil {
			return res, err
		}
	}
	res.Cursor = js.Cursor
	if cu.progress != nil && res.Cursor != "" {
		cu.progress(res.Cursor)
	}
	var first Period
	switch {
	case js.Cursor != "":
		c, err := sched.Parse(js.Cursor)
		if err != nil {
			return res, fmt.Errorf("idem: catch-up %s: the cursor %q is not a period of %s (did the schedule change?): %w", job, js.Cursor, sched, err)
		}
		first = sched.Next(c)
	case !cu.since.IsZero():
		// No start could be recorded (a state file's job that has a
		// pending period but no watermark).
		first = sched.At(cu.since)
	default:
		first = last
	}
	for js.Horizon != "" && first.Name <= js.Horizon && !first.Start.After(last.Start) {
		first = sched.Next(first)
	}
	if first.Start.After(last.Start) {
		// Nothing due: also what a clock that jumped back sees. A
		// duplicate trigger with other parameters is refused all the same.
		if cu.scheduled {
			return res, nil
		}
		return checkLatest(ctx, s, job, last, cfg, res)
	}

	// Count what is due, to report what a cap or a stop leaves behind.
	due := 0
	for p := first; !p.Start.After(last.Start); p = sched.Next(p) {
		due++
	}
	unbroken := true // every period so far is settled: the cursor may move
	var firstErr error
	ran := 0 // periods run (not skipped): what the cap counts
	for p := first; !p.Start.After(last.Start); p = sched.Next(p) {
		if (!cu.latest && cu.maxPeriods > 0 && ran >= cu.maxPeriods) || (firstErr != nil && (!cu.keepGoing || errors.Is(firstErr, ErrDeferred))) || (cu.stop != nil && cu.stop()) {
			break
		}
		key := Key{Job: job, Period: p.Name}
		var pr PeriodResult
		if (cu.latest && p.Name != last.Name) || (cu.window > 0 && p.Name != last.Name && cu.due(p).Before(now.Add(-cu.window))) {
			start := cfg.clock.Now()
			pr = skipPeriod(ctx, s, key, p)
			if cfg.observer != nil { // a Result per period, skipped ones too
				cfg.observer(Result{Key: key, Outcome: pr.Outcome, Duration: cfg.clock.Now().Sub(start), Err: pr.Err})
			}
		} else {
			var r Result
			pc := *cfg // this period's Run: its own copy
			pc.report, pc.retryFrom = &r, now
			pc.catchUp.cursor = unbroken
			ran++
			err := run(ctx, key, p, &pc)
			pr = PeriodResult{Period: p, Outcome: r.Outcome, Err: err}
			if cu.scheduled && errors.Is(err, ErrParamsMismatch) && settledElsewise(ctx, s, key) {
				pr = PeriodResult{Period: p, Outcome: AlreadyDone}
			}
		}
		if pr.Err != nil {
			unbroken = false
			if firstErr == nil {
				firstErr = fmt.Errorf("idem: catch-up %s stopped at %s: %w", job, p.Name, pr.Err)
			}
		} else if unbroken && pr.Outcome != Ran && pr.Outcome != Recovered {
			// Settled without a done mark written now: move the cursor here.
			if err := s.Advance(ctx, job, p.Name); err != nil {
				unbroken = false
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		if unbroken {
			res.Cursor = p.Name
			if cu.progress != nil {
				cu.progress(res.Cursor)
			}
		}
		if cfg.logger != nil {
			cfg.logger.LogAttrs(ctx, slog.LevelInfo, "idem: catch-up period", slog.String("job", job),
				slog.String("period", p.Name), slog.String("outcome", pr.Outcome.String()), slog.Any("error", pr.Err))
		}
		if cu.onPeriod != nil {
			cu.onPeriod(pr)
		}
		res.Periods = append(res.Periods, pr)
	}
	res.Deferred = due - len(res.Periods)
	return res, firstErr
}

// due is when p is due: at its end, or at its start with DueAtStart; in
// either case plus the delay of DueAfter.
func (cu *catchUpConfig) due(p Period) time.Time {
	if cu.dueAtStart {
		return p.Start.Add(cu.delay)
	}
	return p.End.Add(cu.delay)
}

// lastDue is the latest period of sched due at now.
func (cu *catchUpConfig) lastDue(sched Schedule, now time.Time) Period {
	p := sched.At(now.Add(-cu.delay))
	if !cu.dueAtStart {
		p = sched.Prev(p)
	}
	return p
}

// nextDue is when the first period of sched not due at now is due.
func (cu *catchUpConfig) nextDue(sched Schedule, now time.Time) time.Time {
	return cu.due(sched.Next(cu.lastDue(sched, now)))
}

// checkLatest is the answer of a catch-up that found nothing due: with a
// fingerprint (WithParams), the latest due period p, settled already, is
// checked against it, so that a duplicate trigger with other parameters
// gets ErrParamsMismatch (as one period, outcome ParamsMismatch) rather
// than nothing. It writes nothing.
func checkLatest(ctx context.Context, s idemstore.CatchUpStore, job string, p Period, cfg *config, res CatchUpResult) (CatchUpResult, error) {
	if cfg.fingerprint == "" {
		return res, nil
	}
	key := Key{Job: job, Period: p.Name}
	rec, ok, err := s.Lookup(ctx, key)
	if err != nil {
		return res, err
	}
	if !ok || !idemstore.Mismatch(rec.Fingerprint, cfg.fingerprint) {
		return res, nil
	}
	err = mismatch(key, rec.Fingerprint, cfg.fingerprint)
	pr := PeriodResult{Period: p, Outcome: ParamsMismatch, Err: err}
	if cfg.observer != nil {
		cfg.observer(Result{Key: key, Outcome: ParamsMismatch, Err: err})
	}
	if cfg.catchUp.onPeriod != nil {
		cfg.catchUp.onPeriod(pr)
	}
	res.Periods = append(res.Periods, pr)
	return res, fmt.Errorf("idem: catch-up %s stopped at %s: %w", job, p.Name, err)
}

// settledElsewise reports whether key, which refused a scheduled run's
// parameters, is settled (done or skipped): the Scheduler passes over it,
// as it does over any settled period; the parameters it was settled with
// are its own.
func settledElsewise(ctx context.Context, s idemstore.CatchUpStore, key Key) bool {
	rec, ok, err := s.Lookup(ctx, key)
	return err == nil && ok && (rec.Status == StatusDone || rec.Status == StatusSkipped)
}

// skipPeriod records p as skipped (CatchUpLatest), unless it is settled
// already.
func skipPeriod(ctx context.Context, s idemstore.CatchUpStore, key Key, p Period) PeriodResult {
	rec, ok, err := s.Lookup(ctx, key)
	if err != nil {
		return PeriodResult{Period: p, Outcome: Failed, Err: err}
	}
	switch {
	case ok && rec.Status == StatusDone:
		return PeriodResult{Period: p, Outcome: AlreadyDone}
	case ok && rec.Status == StatusSkipped:
		return PeriodResult{Period: p, Outcome: Skipped}
	case ok && (rec.Status == StatusUnknown || rec.Status == StatusParked):
		o := map[Status]Outcome{StatusUnknown: Unknown, StatusParked: Parked}[rec.Status]
		return PeriodResult{Period: p, Outcome: o, Err: &Error{Key: key, Outcome: o, Attempt: rec.Attempt, Err: lastError(rec)}}
	}
	if err := s.Resolve(ctx, key, ResolveSkip); err != nil {
		o := Failed
		if errors.Is(err, ErrNotResolvable) {
			o = InProgress
		}
		return PeriodResult{Period: p, Outcome: o, Err: err}
	}
	return PeriodResult{Period: p, Outcome: Skipped}
}
