// Package catchupcfg is a catch-up's settings, which package catchup's
// options set and package scheduler reads too (when a job's next period
// is due).
package catchupcfg

import (
	"time"

	"github.com/idemgo/idem"
)

// DefaultMaxPeriods is catchup.DefaultMaxPeriods.
const DefaultMaxPeriods = 100

// Settings is what a catch-up's options set. Package catchup's options
// carry a Set as their payload.
type Settings struct {
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
	// Deps are the job's dependencies (catchup.After, AfterPrevious), in
	// the order given.
	Deps []Dep
}

// A Dep is one dependency of a job's periods: those of Job that Map maps
// a period to must be done (or skipped) before the period starts. Job ""
// is the job itself (AfterPrevious).
type Dep struct {
	Job     string
	Mapping string // how it maps, for messages: "same period", "within hourly@UTC", ...
	// Map returns the names of Job's periods that p of a job of schedule
	// own waits for.
	Map func(p idem.Period, own idem.Schedule) []string
	// SameCalendar: Map returns the period's own name (SamePeriod), so Job
	// must have the job's calendar; a Scheduler that has both checks it.
	SameCalendar bool
}

// A Set is the payload of a catch-up option: what it sets.
type Set func(*Settings) error

// Of is the settings that the payloads among ext set, from the defaults;
// the first error is returned, after all are applied.
func Of(ext []any) (Settings, error) {
	st := Settings{MaxPeriods: DefaultMaxPeriods}
	var first error
	for _, p := range ext {
		if f, ok := p.(Set); ok {
			if err := f(&st); err != nil && first == nil {
				first = err
			}
		}
	}
	return st, first
}

// Due is when p is due: at its end, or at its start with DueAtStart; in
// either case plus the delay of DueAfter.
func (st *Settings) Due(p idem.Period) time.Time {
	if st.DueAtStart {
		return p.Start.Add(st.Delay)
	}
	return p.End.Add(st.Delay)
}

// LastDue is the latest period of sched due at now.
func (st *Settings) LastDue(sched idem.Schedule, now time.Time) idem.Period {
	p := sched.At(now.Add(-st.Delay))
	if !st.DueAtStart {
		p = sched.Prev(p)
	}
	return p
}

// NextDue is when the first period of sched not due at now is due.
func (st *Settings) NextDue(sched idem.Schedule, now time.Time) time.Time {
	return st.Due(sched.Next(st.LastDue(sched, now)))
}
