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
// [Ledger.RunTx] commits it together with the done mark: exactly once.
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
// Each call takes the options that mean something for it, and only those:
// passing a fan-out option to Run, or ReportTo to Each, does not compile.
// The option constructors return a class, and each class fits a set of
// calls:
//
//	class          options                                Run  RunTx  CatchUp  CatchUpTx  Each  EachTx  store
//	Option         WithLease, WithBackoff, WithClock,      x    x      x        x          x     x       x
//	               WithLogger, OnResult, WithGuard
//	ModeOption     AtLeastOnce, AtMostOnce, TwoPhase       x           x                   x             x
//	AttemptOption  RetryWithin, OneAttempt, WaitForTurn    x    x      x        x                        x
//	ReportOption   ReportTo                                x    x
//	CatchUpPolicy  CatchUpAll, CatchUpLatest, Since,                   x        x
//	               DueAtStart, DueAfter, CatchUpWindow,
//	               ContinueAfterFailure, OnPeriod
//	FanOutOption   WithWorkers, WithBatch, OnProgress,                                     x     x
//	               WithRate, WithPause, WithBreaker
//	ParamsOption   WithParams, WithParamsBytes             x    x      x        x          x     x
//
// A [Scheduler]'s job takes what the catch-up it runs takes, plus a
// [JobSetting] (WithJitter, RunOverlapping, WithLagTolerance): Scheduler.Add
// takes a [JobOption] (the options of CatchUp), AddTx a [JobTxOption]
// (those of CatchUpTx). NewScheduler takes a [SchedulerOption]: every
// Option, as the default of every job, and WithMaxRunning.
//
// The "store" column is the defaults given to a store's constructor
// ([StoreOption]): they apply to every call on the store, and a default
// that means nothing for a call (a mode, for RunTx) is ignored there. A
// value an option cannot take (a negative duration, a nil function) is an
// error matching [ErrInvalidOption], returned by the call before anything
// is written; nothing is clamped.
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
// OnPeriod, OnProgress). The Backoff decorators (Capped, MaxAttempts,
// FullJitter, EqualJitter) are not options: each returns a Backoff
// "with" a cap, a limit or a jitter.
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
