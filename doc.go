// Package idem makes scheduled jobs idempotent: a job triggered ten times for
// the same business period has the effect of one run, and periods missed
// while the host was down get done.
//
// cron, systemd timers and Kubernetes CronJobs start a job at least once,
// not exactly once: the previous run is still going, a drained node's Pod is
// re-created, a timer catches up after downtime, someone re-runs it by hand.
// Wrap the job's work in Run with a [Key] naming the job and the business
// period the run is for:
//
//	key := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
//	err := idem.Run(ctx, key, func(ctx context.Context) error {
//		return settle(ctx, "2026-10-27")
//	})
//
// Run claims the key in a durable store, runs fn, and marks the key done; a
// second Run of a done key returns nil without running fn. A claim is a
// lease with a fencing token, so a process that dies or stalls cannot finish
// over a newer attempt. What happens when a process dies between fn's effect
// and the done mark depends on the mode: [AtLeastOnce] (the default) runs fn
// again, [AtMostOnce] leaves the key unknown for a person, [TwoPhase] asks
// the downstream. When fn's effect is a write in the ledger's own database,
// [RunTx] commits it together with the done mark: exactly once.
//
// Stores: [Ledger] (a SQLite file, one host), [StateFile] (a JSON file, for
// jobs without a database), and the Postgres ledger in the pgledger module
// (many hosts). Package idemtest injects crashes at every protocol step so
// you can prove your own job survives them.
//
// The interfaces a store implements, and the protocol rules the stores
// share, are in package idemstore, for those who write a store; the types
// of it that a job or an operator names (Key, Record, Status, Resolution,
// ...) are here too, under the same names.
//
// # Options
//
// Every call takes options of one type, [Option], so that one slice of
// them can be shared by Run, RunTx, a catch-up, a fan-out, a Scheduler and
// a store's defaults. Each option is for some calls, and one given to a
// call it is not for is an error matching [ErrInvalidOption] that names
// the option and the call, returned before anything is written:
//
//	options                                       Run  RunTx  CatchUp  Each  EachTx  Scheduler job  store
//	WithLease, WithBackoff, WithClock,            x    x      x        x     x       x              x
//	WithLogger, OnResult, WithGuard
//	AtLeastOnce, AtMostOnce, TwoPhase             x           x        x             x              x
//	RetryWithin, OneAttempt, WaitForTurn          x    x      x                      x              x
//	ReportTo                                      x    x
//	WithParams, WithParamsBytes                   x    x      x        x     x       x
//	CatchUpAll, CatchUpLatest, Since,                         x                      x
//	DueAtStart, DueAfter, ...
//	WithWorkers, WithBatch, OnProgress,                                x     x
//	WithRate, WithPause, WithBreaker
//	WithJitter, RunOverlapping, ...                                                  x
//	WithLockWait                                                                                    x
//
// A transactional call (RunTx, CatchUpTx, EachTx, AddTx) takes no mode:
// it is exactly once for writes in the store's database. NewScheduler
// takes the options of every call, as the defaults of every job, and
// WithMaxRunning. The "store" column is the defaults
// given to a store's constructor: they apply to every call on the store,
// and a default that means nothing for a call (a mode, for RunTx) is
// ignored there. A value an option cannot take (a negative duration, a nil
// function) is an error matching [ErrInvalidOption] too; nothing is
// clamped.
//
// Catch-up ([CatchUp]: the due periods of a job, after downtime), fan-out
// ([Each]: one period, many items) and the [Scheduler] (jobs on their
// schedules in a service) are part of this package. Packages above it
// build on its API alone: guard (memory and disk guards for [WithGuard]),
// limit (rates and runs at once shared through the store, for
// [WithLimits]), outbox (messages that commit with a job's transaction,
// and their relay).
//
// # Names
//
// Options follow one pattern: With<Noun>(value) sets a setting
// (WithLease, WithBackoff, WithClock, WithLogger, WithGuard, WithWorkers,
// WithBatch, WithRate, WithPause, WithBreaker, WithParams);
// a bare name chooses a behaviour or a policy, with or without a value
// (AtLeastOnce, TwoPhase(has), RetryWithin(d), OneAttempt, WaitForTurn,
// ReportTo(&r), CatchUpAll(n), CatchUpLatest, Since(t), DueAtStart,
// ContinueAfterFailure); On<Event>(f) registers a callback (OnResult,
// OnPeriod, OnProgress). The
// Backoff decorators (Capped, MaxAttempts, FullJitter, EqualJitter) are
// not options: each returns a Backoff.
//
// A state has one name wherever it shows: a key that waits for an operator's
// Reset is parked in its record ([StatusParked]), in a call's outcome
// ([Parked]), in the sentinel ([ErrParked]), in metric labels
// (Outcome.String: "parked") and in the command line's messages. It is
// parked because its [Backoff] gave up (giving up is what a backoff does)
// or because fn returned a [Permanent] error. Likewise a key in doubt is
// unknown (StatusUnknown, Unknown, ErrUnknownOutcome); the other outcomes
// say what a call found: a running record is in progress (InProgress,
// ErrInProgress), a failed one is backing off until its next allowed
// attempt (BackingOff, ErrBackingOff).
package idem
