package idem

// Catch-up: CatchUp does the due periods of a job that are not done yet,
// oldest first, each through Run: what a job triggered by cron or a timer
// calls instead of Run, so that after downtime the missed periods get
// done, and never twice. Its options set catchUpSettings
// (catchup_settings.go); dependencies between jobs' periods are
// catchup_deps.go; a Scheduler runs its jobs through loop.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// DefaultMaxPeriods is how many due periods one CatchUp does at most, unless
// [CatchUpAll] says otherwise: an explicit version of Kubernetes' "100 missed
// start times" rule, except that the rest is not dropped but left for the
// next call.
const DefaultMaxPeriods = 100

// PeriodResult is what catch-up did with one period.
type PeriodResult struct {
	Period  Period
	Outcome Outcome // Ran, AlreadyDone, Recovered, Skipped, Waiting, or the failure's outcome
	Err     error   // nil unless the period failed
	Waiting Waits   // Waiting: the upstream periods not done yet ([After])
}

// CatchUpResult reports a CatchUp or CatchUpTx call.
type CatchUpResult struct {
	Periods  []PeriodResult // in order, oldest first
	Deferred int            // due periods left for a later call (the MaxPeriods cap, a stop at a failure, or a period that waits)
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
// instead of Run: after downtime, the missed periods get done. The store
// keeps each job's cursor: behind s there must be an
// [idemstore.CatchUpStore] (Ledger, StateFile and the Postgres
// and Redis stores have one); another store is an error naming it, before
// anything runs.
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
// of idem whose catch-up could skip it) is not reached by Run again;
// run it with Run, or Resolve it.
//
// Dependencies: with [After] (or [AfterPrevious]) a period waits, unclaimed
// and with no error, until the periods it depends on are done (outcome
// [Waiting]; see After).
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
// handled, skipped periods included; the call's result is a Result.
//
// fn must not call Run or RunTx for its own period (the key is held by
// the Run that called fn: [ErrNestedRun]); for business writes that commit
// with each period's done mark, use [CatchUpTx].
func CatchUp(ctx context.Context, s Store, job string, sched Schedule, fn func(ctx context.Context, p Period) error, opts ...Option) (CatchUpResult, error) {
	return catchUp(ctx, s, job, sched, fn, opts, nil)
}

// catchUp is CatchUp; a Scheduler's look at its job sets look.
func catchUp(ctx context.Context, s Store, job string, sched Schedule, fn func(ctx context.Context, p Period) error, opts []Option, look *schedLook) (CatchUpResult, error) {
	if fn == nil || sched == nil || s == nil {
		panic("idem: CatchUp needs a store, a schedule and a fn")
	}
	cs, err := storeAs[idemstore.CatchUpStore]("CatchUp", s)
	if err != nil {
		return CatchUpResult{}, err
	}
	return loop(ctx, cs, job, sched, callCatchUp, opts, look, func(ctx context.Context, key Key, p Period, opts []Option) error {
		return RunOn(ctx, s, key, func(ctx context.Context) error { return fn(ctx, p) }, opts...)
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
// Periods, policies, the cursor and the options are as in Run; it
// takes no mode option, and ignores a store's default mode (see RunTx). A failing period's writes are
// rolled back and the catch-up stops there (unless
// [ContinueAfterFailure]); the error returned is that period's. As in
// RunTx, write idempotent, recomputing statements: they are what the
// re-run of a rolled-back period repeats.
func CatchUpTx[Tx any](ctx context.Context, s TxStore[Tx], job string, sched Schedule, fn func(ctx context.Context, tx Tx, p Period) error, opts ...Option) (CatchUpResult, error) {
	return catchUpTx(ctx, s, job, sched, fn, opts, nil)
}

// catchUpTx is CatchUpTx; a Scheduler's look at its job sets look.
func catchUpTx[Tx any](ctx context.Context, s TxStore[Tx], job string, sched Schedule, fn func(ctx context.Context, tx Tx, p Period) error, opts []Option, look *schedLook) (CatchUpResult, error) {
	if fn == nil || sched == nil || s == nil {
		panic("idem: CatchUpTx needs a store, a schedule and a fn")
	}
	cs, err := storeAs[idemstore.CatchUpTxStore[Tx]]("CatchUpTx", s)
	if err != nil {
		return CatchUpResult{}, err
	}
	return loop(ctx, cs, job, sched, callCatchUpTx, opts, look, func(ctx context.Context, key Key, p Period, opts []Option) error {
		return RunTx(ctx, s, key, func(ctx context.Context, tx Tx) error { return fn(ctx, tx, p) }, opts...)
	})
}

// loop is CatchUp's and CatchUpTx's loop, for the call cl with opts (and
// a Scheduler's look, if it is one); run runs one period with the options
// given. It checks the call, finds the first period to do (startCursor,
// firstToDo), then walks the due periods oldest first: each is skipped
// (CatchUpLatest, CatchUpWindow), waits for its dependencies (which ends
// the walk) or runs, and the cursor follows the unbroken run of settled
// periods (moveCursor).
func loop(ctx context.Context, s idemstore.CatchUpStore, job string, sched Schedule, cl call, opts []Option, look *schedLook,
	run func(ctx context.Context, key Key, p Period, opts []Option) error) (res CatchUpResult, err error) {
	if idemstore.Traced(ctx) {
		var end func(idemstore.SpanEnd)
		ctx, end = idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanCatchUp, Key: Key{Job: job},
			Attrs: []idemstore.Attr{{Key: idemstore.AttrCall, Value: "idem." + cl.name}}})
		defer func() {
			end(idemstore.SpanEnd{Err: err, Attrs: []idemstore.Attr{{Key: idemstore.AttrPeriods, Value: len(res.Periods)}}})
		}()
	}
	cfg := configure(s, cl, opts)
	cu, onPeriod := cfg.catchUp, cfg.onPeriod
	if look != nil {
		look.set(&cu)
	}
	if cfg.err != nil {
		return res, cfg.err
	}
	if err := checkCatchUpJob(job, cl.name, cu.Deps); err != nil {
		return res, err
	}
	plain := runOptions(opts)
	clock := cfg.clock
	js, now, last, err := startCursor(ctx, s, job, sched, cl.name, &cu, clock)
	if err != nil {
		return res, err
	}
	res.Cursor = js.Cursor
	if cu.Progress != nil && res.Cursor != "" {
		cu.Progress(res.Cursor)
	}
	first, err := firstToDo(job, sched, js, &cu, last)
	if err != nil {
		return res, err
	}
	// Periods behind the cursor that a re-run request (Rerun) made
	// runnable again run first, each once for its revision; the cursor
	// does not move for them, and one that fails, or waits for its
	// upstream's re-run, waits for the next call without holding up the
	// periods after the cursor.
	reruns, err := runReruns(ctx, s, job, js.Cursor, sched, cu.Deps, cfg, plain, now, onPeriod, run)
	if err != nil {
		return res, err
	}
	res.Periods = append(res.Periods, reruns...)
	if first.Start.After(last.Start) {
		// Nothing due: also what a clock that jumped back sees. A
		// duplicate trigger with other parameters is refused all the same.
		if cu.Scheduled {
			return res, nil
		}
		return checkLatest(ctx, s, job, last, cfg, onPeriod, res)
	}

	// Count what is due, to report what a cap or a stop leaves behind.
	due := 0
	for p := first; !p.Start.After(last.Start); p = sched.Next(p) {
		due++
	}
	unbroken := true // every period so far is settled: the cursor may move
	var firstErr error
	ran := 0 // periods run (not skipped): what the cap counts
	observer := cfg.observer
	for p := first; !p.Start.After(last.Start); p = sched.Next(p) {
		if (!cu.Latest && cu.MaxPeriods > 0 && ran >= cu.MaxPeriods) || (firstErr != nil && (!cu.KeepGoing || errors.Is(firstErr, ErrDeferred))) || (cu.Stop != nil && cu.Stop()) {
			break
		}
		key := Key{Job: job, Period: p.Name}
		var pr PeriodResult
		if (cu.Latest && p.Name != last.Name) || (cu.Window > 0 && p.Name != last.Name && cu.Due(p).Before(now.Add(-cu.Window))) {
			start := clock.Now()
			pr = skipPeriod(ctx, s, key, p)
			if observer != nil { // a Result per period, skipped ones too
				observer(Result{Key: key, Outcome: pr.Outcome, Duration: clock.Now().Sub(start), Err: pr.Err})
			}
		} else if w, err := waits(ctx, s, job, js.Cursor, sched, p, cu.Deps); err != nil || len(w) > 0 {
			// Upstream periods not done: this one waits, unclaimed, and so
			// do the periods after it. Not a failure (unless the store's
			// read failed).
			pr = waitingPeriod(ctx, cfg, key, p, w, err)
			unbroken = false
			if pr.Err != nil && firstErr == nil {
				firstErr = fmt.Errorf("idem: catch-up %s stopped at %s: %w", job, p.Name, pr.Err)
			}
			if onPeriod != nil {
				onPeriod(pr)
			}
			res.Periods = append(res.Periods, pr)
			break
		} else {
			// This period's Run: the call's options, its report, the
			// call's start for RetryWithin, and the cursor's move.
			var r Result
			popts := append(append([]Option(nil), plain...), ReportTo(&r), internalOption(now, unbroken))
			ran++
			err := run(ctx, key, p, popts)
			pr = PeriodResult{Period: p, Outcome: r.Outcome, Err: err}
			if cu.Scheduled && errors.Is(err, ErrParamsMismatch) && settledElsewise(ctx, s, key) {
				pr = PeriodResult{Period: p, Outcome: AlreadyDone}
			}
		}
		unbroken, firstErr = moveCursor(ctx, s, job, p, pr, unbroken, firstErr)
		if unbroken {
			res.Cursor = p.Name
			if cu.Progress != nil {
				cu.Progress(res.Cursor)
			}
		}
		if logger := cfg.logger; logger != nil {
			logger.LogAttrs(ctx, slog.LevelInfo, "idem: catch-up period", slog.String("job", job),
				slog.String("period", p.Name), slog.String("outcome", pr.Outcome.String()), slog.Any("error", pr.Err))
		}
		if onPeriod != nil {
			onPeriod(pr)
		}
		res.Periods = append(res.Periods, pr)
	}
	res.Deferred = due - (len(res.Periods) - len(reruns))
	return res, firstErr
}

// runReruns runs the periods of job at or before its cursor that a re-run
// request made runnable again (see loop), if the store re-runs, oldest
// first. One whose dependencies (deps: After, AfterPrevious) are not done
// waits, unclaimed, as a period after the cursor does (outcome Waiting):
// an upstream period re-run by the same request (RerunWithDependents) is
// not done until its new revision is. Under AfterPrevious the job's own
// previous period counts as settled at or before the cursor unless it is
// a re-run of this pass that did not end done.
func runReruns(ctx context.Context, s idemstore.CatchUpStore, job, cursor string, sched Schedule, deps []catchUpDep, cfg *config, plain []Option, now time.Time,
	onPeriod func(PeriodResult), run func(ctx context.Context, key Key, p Period, opts []Option) error) ([]PeriodResult, error) {
	rs, ok := s.(idemstore.Rerunner)
	if !ok || cursor == "" {
		return nil, nil
	}
	names, err := rs.RerunsDue(ctx, job, cursor)
	if err != nil {
		return nil, err
	}
	var out []PeriodResult
	unsettled := map[string]Status{} // this pass's re-runs that did not end done
	for _, name := range names {
		p, err := sched.Parse(name)
		if err != nil {
			return out, fmt.Errorf("idem: catch-up %s: re-run of period %q: %w", job, name, err)
		}
		key := Key{Job: job, Period: name}
		w, err := waits(ctx, s, job, cursor, sched, p, deps)
		for _, d := range deps {
			if d.Job != "" {
				continue
			}
			for _, prev := range d.Map(p, sched) {
				if st, ok := unsettled[prev]; ok {
					w = append(w, Wait{Key: Key{Job: job, Period: prev}, Status: st})
				}
			}
		}
		var pr PeriodResult
		if err != nil || len(w) > 0 {
			pr = waitingPeriod(ctx, cfg, key, p, w, err)
		} else {
			var r Result
			popts := append(append([]Option(nil), plain...), ReportTo(&r), internalOption(now, false))
			err = run(ctx, key, p, popts)
			pr = PeriodResult{Period: p, Outcome: r.Outcome, Err: err}
		}
		if pr.Err != nil || (pr.Outcome != Ran && pr.Outcome != Recovered && pr.Outcome != AlreadyDone) {
			unsettled[name] = StatusFailed
		}
		if onPeriod != nil {
			onPeriod(pr)
		}
		out = append(out, pr)
	}
	return out, nil
}

// checkCatchUpJob refuses, before anything is read or written, a job name
// the stores cannot hold and a dependency of the job on its own periods
// through After (which could never be met: AfterPrevious says that).
func checkCatchUpJob(job, callName string, deps []catchUpDep) error {
	if err := idemstore.ValidateJob(job); err != nil {
		return err
	}
	for _, d := range deps {
		if d.Job == job {
			return invalidOption("After(%q, %s) in %s of job %q: a job cannot wait for its own periods (use AfterPrevious)", d.Job, d.Mapping, callName, job)
		}
	}
	return nil
}

// startCursor reads job's state, and the time now on clock and the latest
// period due then (last). On the job's first catch-up it records where the
// job starts (its cursor: the period before the first to run) before any
// period runs, so that a first period that fails is where the next call
// starts too; a Since whose period is not due yet is refused first.
func startCursor(ctx context.Context, s idemstore.CatchUpStore, job string, sched Schedule, callName string, cu *catchUpSettings, clock Clock) (js idemstore.JobState, now time.Time, last Period, err error) {
	js, err = s.Job(ctx, job)
	if err != nil {
		return js, now, last, err
	}
	now = clock.Now()
	last = cu.LastDue(sched, now)
	if js.Cursor == "" && !cu.Since.IsZero() {
		// A start after the next period to become due would record, as the
		// cursor, a period that is not due yet: the periods up to it would
		// count as settled without having run. Refused before anything is
		// written.
		if p, next := sched.At(cu.Since), sched.Next(last); p.Start.After(next.Start) {
			return js, now, last, invalidOption("Since(%s) in %s of job %q is in the future: its period %s comes after %s, the next period to become due (now is %s)",
				cu.Since.Format(time.RFC3339), callName, job, p.Name, next.Name, now.Format(time.RFC3339))
		}
	}
	if js.Cursor == "" {
		first := last
		if !cu.Since.IsZero() {
			first = sched.At(cu.Since)
		}
		if js, err = s.Start(ctx, job, sched.Prev(first).Name); err != nil {
			return js, now, last, err
		}
	}
	return js, now, last, nil
}

// firstToDo is the first period of job that catch-up has to do: the one
// after the cursor in js, or else Since's, or else the latest due (last);
// periods at or before the retention horizon count as done and are passed
// over. It comes after last when nothing is due.
func firstToDo(job string, sched Schedule, js idemstore.JobState, cu *catchUpSettings, last Period) (Period, error) {
	var first Period
	switch {
	case js.Cursor != "":
		c, err := sched.Parse(js.Cursor)
		if err != nil {
			return first, fmt.Errorf("idem: catch-up %s: the cursor %q is not a period of %s (did the schedule change?): %w", job, js.Cursor, sched, err)
		}
		first = sched.Next(c)
	case !cu.Since.IsZero():
		// No start could be recorded (a state file's job that has a
		// pending period but no watermark).
		first = sched.At(cu.Since)
	default:
		first = last
	}
	for js.Horizon != "" && first.Name <= js.Horizon && !first.Start.After(last.Start) {
		first = sched.Next(first)
	}
	return first, nil
}

// waitingPeriod is the result of period p (key), whose upstream periods w
// are not done (or could not be read: readErr): outcome Waiting, or Failed
// with readErr. The call's observer gets it, and its logger the wait.
func waitingPeriod(ctx context.Context, cfg *config, key Key, p Period, w Waits, readErr error) PeriodResult {
	pr := PeriodResult{Period: p, Outcome: Waiting, Waiting: w}
	if readErr != nil {
		pr = PeriodResult{Period: p, Outcome: Failed, Err: readErr}
	}
	if observer := cfg.observer; observer != nil {
		observer(Result{Key: key, Outcome: pr.Outcome, Err: pr.Err})
	}
	if logger := cfg.logger; logger != nil && readErr == nil {
		logger.LogAttrs(ctx, slog.LevelInfo, "idem: catch-up period waits", slog.String("job", key.Job),
			slog.String("period", p.Name), slog.String("for", w.String()))
	}
	return pr
}

// moveCursor moves job's cursor over period p, whose result is pr, while every
// period so far is settled (unbroken): a period done now moved it in its
// own transaction, one settled otherwise (done already, skipped) moves it
// here. A failure breaks the run, and the first is the call's error. It
// returns unbroken and firstErr as they are after p.
func moveCursor(ctx context.Context, s idemstore.CatchUpStore, job string, p Period, pr PeriodResult, unbroken bool, firstErr error) (bool, error) {
	if pr.Err != nil {
		if firstErr == nil {
			firstErr = fmt.Errorf("idem: catch-up %s stopped at %s: %w", job, p.Name, pr.Err)
		}
		return false, firstErr
	}
	if unbroken && pr.Outcome != Ran && pr.Outcome != Recovered {
		// Settled without a done mark written now: move the cursor here.
		if err := s.Advance(ctx, job, p.Name); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return false, firstErr
		}
	}
	return unbroken, firstErr
}

// checkLatest is the answer of a catch-up that found nothing due: with a
// fingerprint (WithParams), the latest due period p, settled already, is
// checked against it, so that a duplicate trigger with other parameters
// gets ErrParamsMismatch (as one period, outcome ParamsMismatch) rather
// than nothing. It writes nothing.
func checkLatest(ctx context.Context, s idemstore.CatchUpStore, job string, p Period, cfg *config, onPeriod func(PeriodResult), res CatchUpResult) (CatchUpResult, error) {
	fp := cfg.fingerprint
	if fp == "" {
		return res, nil
	}
	key := Key{Job: job, Period: p.Name}
	rec, ok, err := s.Lookup(ctx, key)
	if err != nil {
		return res, err
	}
	if !ok || !idemstore.Mismatch(rec.Fingerprint, fp) {
		return res, nil
	}
	err = mismatch(key, rec.Fingerprint, fp)
	pr := PeriodResult{Period: p, Outcome: ParamsMismatch, Err: err}
	if observer := cfg.observer; observer != nil {
		observer(Result{Key: key, Outcome: ParamsMismatch, Err: err})
	}
	if onPeriod != nil {
		onPeriod(pr)
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

// policy is the catch-up option named name: set sets the call's catch-up
// settings.
func policy(name string, set func(*catchUpSettings) error) Option {
	return newOption(name, classCatchUp, func(c *config) error { return set(&c.catchUp) })
}

// CatchUpAll runs every due period, oldest first, at most max of them per call
// (max = 0: no limit). The rest are counted in Result.Deferred and run by
// the next call. This is the default, with max = DefaultMaxPeriods. A
// negative max is an error matching [ErrInvalidOption].
func CatchUpAll(max int) Option {
	return policy("CatchUpAll", func(c *catchUpSettings) error {
		if max < 0 {
			return invalidOption("CatchUpAll(%d): the cap must not be negative (0 means no cap)", max)
		}
		c.Latest, c.MaxPeriods = false, max
		return nil
	})
}

// CatchUpLatest coalesces: only the newest due period runs; the older ones are
// recorded as skipped (ResolveSkip), not silently forgotten (no cap
// applies to the skipping). Periods that are unknown or parked are not
// skipped: catch-up stops at them, since they need a person.
func CatchUpLatest() Option {
	return policy("CatchUpLatest", func(c *catchUpSettings) error { c.Latest = true; return nil })
}

// Since bounds the first catch-up of a job (one with no cursor yet): it
// starts at the period containing t instead of only the latest due period,
// so a new job backfills a chosen window and never from the epoch. A t in
// the period after the latest due one starts the job with that period (the
// first call runs nothing and records the latest due period as settled:
// idem serve --since next). A t later than that is an error matching
// [ErrInvalidOption], naming the job, t and now, returned before
// anything is written, as is a zero t.
func Since(t time.Time) Option {
	return policy("Since", func(c *catchUpSettings) error {
		if t.IsZero() {
			return invalidOption("Since(%v): the zero time is no start", t)
		}
		c.Since = t
		return nil
	})
}

// DueAtStart makes a period due as soon as it starts (a report FOR today,
// sent in the morning). By default a period is due when it ends: you settle
// a day once it is over.
func DueAtStart() Option {
	return policy("DueAtStart", func(c *catchUpSettings) error { c.DueAtStart = true; return nil })
}

// CatchUpWindow records the due periods that became due more than w ago as
// skipped (ResolveSkip) instead of running them: after a long outage, only
// the periods of the last w run (Temporal's catchupWindow). The latest due
// period always runs, however old. Skipped periods do not count against
// the cap of [CatchUpAll]; unknown or parked periods are not skipped (catch-up
// stops at them, as with [CatchUpLatest]). A w of zero or less is an error
// matching [ErrInvalidOption].
func CatchUpWindow(w time.Duration) Option {
	return policy("CatchUpWindow", func(c *catchUpSettings) error {
		if w <= 0 {
			return invalidOption("CatchUpWindow(%v): the window must be positive", w)
		}
		c.Window = w
		return nil
	})
}

// DueAfter makes a period due d after it ends (or starts, with
// [DueAtStart]): Daily(loc) with DueAfter(2*time.Hour) settles
// yesterday at 02:00, once late records have landed. A negative d is an
// error matching [ErrInvalidOption].
func DueAfter(d time.Duration) Option {
	return policy("DueAfter", func(c *catchUpSettings) error {
		if d < 0 {
			return invalidOption("DueAfter(%v): the delay must not be negative", d)
		}
		c.Delay = d
		return nil
	})
}

// ContinueAfterFailure makes catch-up go on with later periods when one
// fails. By default it stops at the failed period and the later ones wait,
// so periods complete in order. Either way the cursor only moves over an
// unbroken run of settled periods.
func ContinueAfterFailure() Option {
	return policy("ContinueAfterFailure", func(c *catchUpSettings) error { c.KeepGoing = true; return nil })
}

// OnPeriod calls f after each period catch-up handles, for progress
// reporting on long catch-ups. A nil f is an error matching
// [ErrInvalidOption].
func OnPeriod(f func(PeriodResult)) Option {
	return newOption("OnPeriod", classCatchUp, func(c *config) error {
		if f == nil {
			return invalidOption("OnPeriod(nil): no function to call")
		}
		c.onPeriod = f
		return nil
	})
}

// internalOption sets, for a Run that a catch-up makes, the start of the
// catch-up (retryFrom, for RetryWithin) and whether its done mark moves
// the job's cursor.
func internalOption(retryFrom time.Time, cursor bool) Option {
	return newOption("internal", classInternal, func(c *config) error {
		if !retryFrom.IsZero() {
			c.retryFrom = retryFrom
		}
		c.cursor = cursor
		return nil
	})
}

// runOptions is opts without the catch-up's and a Scheduler's own: what a
// catch-up passes on to Run or RunTx (nil ones kept, for their error).
func runOptions(opts []Option) []Option {
	return withoutClasses(opts, classCatchUp|classJob|classScheduler)
}
