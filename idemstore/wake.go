package idemstore

import "context"

// Waker is a store that tells the Schedulers of every process sharing it
// that a job's periods were changed by hand, so that they look at the job
// at once rather than at its next due time: a reset or a resolve (Resolve),
// a re-run request (Rerunner.Rerun) and a "run now" (idem run-now, the
// operators' page) each leave a wake mark. A Scheduler reads the marks
// every idem.SchedulerWakePoll.
//
// A store that implements Waker writes the mark of a job in the same
// transaction as the Resolve or Rerun that changed its periods. The marks
// are one row per job ever woken, numbered from one counter: a wake takes
// the counter's row lock until it commits, so the marks are numbered in
// the order their transactions commit, and a reader that has seen mark n
// sees every mark below n. A store without Waker keeps the older
// behaviour: a Scheduler learns of the change at the job's next due time
// (or when it restarts).
type Waker interface {
	// Wake marks job as woken: the Schedulers that run it look at it at
	// their next poll. Durable when it returns.
	Wake(ctx context.Context, job string) error

	// Woken returns the jobs woken after mark after (0: every job ever
	// woken) and the mark to pass next (after itself if none). It is one
	// read of a store's index: the Schedulers call it every few seconds.
	Woken(ctx context.Context, after int64) (jobs []string, next int64, err error)
}

// WakeMarkPrefix is the prefix of the name of a job's wake mark in a SQL
// store's meta table (name → value): the mark of job j is named
// WakeMarkPrefix + j, and WakeCounter names the counter that numbers them.
const (
	WakeMarkPrefix = "wake/"
	WakeCounter    = "wake_counter"
)
