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
//	class          options                                       Run  RunTx  CatchUp  CatchUpTx  Each  EachTx  store
//	Option         WithLease, WithBackoff, WithClock,             x    x      x        x          x     x       x
//	               WithLogger, WithObserver
//	ModeOption     AtLeastOnce, AtMostOnce, TwoPhase              x           x                   x             x
//	AttemptOption  RetryWithin, OneAttempt, WithWait              x    x      x        x                        x
//	ReportOption   ReportTo                                       x    x
//	CatchUpPolicy  CatchUpAll, CatchUpLatest, Since, DueAtStart,              x        x
//	               ContinueAfterFailure, OnPeriod
//	FanOutOption   WithWorkers, WithBatch, OnProgress                                             x     x
//
// The "store" column is the defaults given to a store's constructor
// ([StoreOption]): they apply to every call on the store, and a default
// that means nothing for a call (a mode, for RunTx) is ignored there. A
// value an option cannot take (a negative duration, a nil function) is an
// error matching [ErrInvalidOption], returned by the call before anything
// is written; nothing is clamped.
package idem
