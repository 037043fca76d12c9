package idem

import (
	"time"
)

// catchUpSettings is what a catch-up's options set (config.catchUp); a
// Scheduler reads them too, for when a job's next period is due.
type catchUpSettings struct {
	Latest     bool
	MaxPeriods int
	Since      time.Time
	DueAtStart bool
	KeepGoing  bool
	Delay      time.Duration // DueAfter
	Window     time.Duration // CatchUpWindow: periods due longer ago are recorded skipped
	// Stop, for a Scheduler: it is shutting down; no further period
	// starts.
	Stop func() bool
	// Scheduled: a Scheduler's look, not a trigger of its periods: with
	// nothing due it checks nothing, and a period settled (done or
	// skipped) with other parameters is passed over as done.
	Scheduled bool
	// Progress, for a Scheduler, is told the job's cursor as the catch-up
	// reads it and moves it (its lag does not wait for the catch-up to
	// return).
	Progress func(cursor string)
	// Deps are the job's dependencies (After, AfterPrevious), in
	// the order given.
	Deps []catchUpDep
}

// A catchUpDep is one dependency of a job's periods: those of Job that Map maps
// a period to must be done (or skipped) before the period starts. Job ""
// is the job itself (AfterPrevious).
type catchUpDep struct {
	Job     string
	Mapping string // how it maps, for messages: "same period", "within hourly@UTC", ...
	// Map returns the names of Job's periods that p of a job of schedule
	// own waits for.
	Map func(p Period, own Schedule) []string
	// SameCalendar: Map returns the period's own name (SamePeriod), so Job
	// must have the job's calendar; a Scheduler that has both checks it.
	SameCalendar bool
}

// Due is when p is due: at its end, or at its start with DueAtStart; in
// either case plus the delay of DueAfter.
func (st *catchUpSettings) Due(p Period) time.Time {
	if st.DueAtStart {
		return p.Start.Add(st.Delay)
	}
	return p.End.Add(st.Delay)
}

// LastDue is the latest period of sched due at now.
func (st *catchUpSettings) LastDue(sched Schedule, now time.Time) Period {
	p := sched.At(now.Add(-st.Delay))
	if !st.DueAtStart {
		p = sched.Prev(p)
	}
	return p
}

// NextDue is when the first period of sched not due at now is due.
func (st *catchUpSettings) NextDue(sched Schedule, now time.Time) time.Time {
	return st.Due(sched.Next(st.LastDue(sched, now)))
}
