package idem

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

// A Mapping says which periods of an upstream job a period of the job
// waits for ([After]).
type Mapping struct {
	name string
	same bool
	f    func(p Period, own Schedule) []string
}

// SamePeriod maps a period to the upstream's period of the same name:
// for jobs of one calendar ("mail the merchants after the day is
// settled"). A Scheduler that runs both jobs refuses it, when the job is
// added, if their schedules differ.
func SamePeriod() Mapping {
	return Mapping{name: "same period", same: true, f: func(p Period, _ Schedule) []string { return []string{p.Name} }}
}

// Within maps a period to every period of upstream, the upstream job's
// schedule, that starts inside it (p.Start <= q.Start < p.End): a daily
// job after an hourly one waits for the day's 24 hours (23 or 25 on a
// day that a daylight-saving change shortens or lengthens, in the
// schedule's zone); a monthly report after a daily job, for the month's
// 28 to 31 days. An upstream period that starts before the period and
// ends inside it is not waited for.
func Within(upstream Schedule) Mapping {
	if upstream == nil {
		return Mapping{}
	}
	return Mapping{name: "within " + upstream.String(), f: func(p Period, _ Schedule) []string {
		var names []string
		q := upstream.At(p.Start)
		if q.Start.Before(p.Start) {
			q = upstream.Next(q)
		}
		for ; q.Start.Before(p.End); q = upstream.Next(q) {
			names = append(names, q.Name)
		}
		return names
	}}
}

// Upstream returns the names of the upstream's periods that p, a period
// of a job of schedule own, waits for under m: what a catch-up looks up
// (an operator's page shows it too).
func (m Mapping) Upstream(p Period, own Schedule) []string {
	if m.f == nil {
		return nil
	}
	return m.f(p, own)
}

// MapFunc maps a period with f, which returns the names of the upstream's
// periods it waits for (none: it waits for nothing). name describes the
// mapping in messages.
func MapFunc(name string, f func(p Period) []string) Mapping {
	if f == nil {
		return Mapping{}
	}
	return Mapping{name: name, f: func(p Period, _ Schedule) []string { return f(p) }}
}

// After makes each period of the job wait until the periods of the job
// upstream that m maps it to are done (or settled as skipped, or below
// upstream's retention horizon): "mail after settle", After("settle",
// SamePeriod()). Several After add up. An upstream period with no record
// at or before the upstream's cursor counts as settled, as AfterPrevious
// counts the job's own: it is before the upstream began (its [Since], or
// the latest due period of its first catch-up), and its catch-up never
// goes back to it. A job whose catch-up has never run has no cursor: its
// periods are waited for, "not run yet".
//
// Waiting is not failing: a period whose upstream periods are not all
// done is not claimed and its fn not called; no attempt or failure is
// counted, no backoff runs, it is never parked. The catch-up stops there
// (the periods after it wait too) and returns no error, with the period's
// [PeriodResult] of outcome [Waiting] listing what it waits for
// (PeriodResult.Waiting: each upstream key and its status, "" when the
// store has no record of it, as for a job it has never seen). An upstream
// period that is parked or unknown is said so there: it waits for a
// person, and so does the period. The next call looks again; a Scheduler
// looks again as soon as it finishes a period of upstream, else at its
// next recheck.
//
// An empty upstream, the job itself (use [AfterPrevious]) or a zero
// Mapping is an error matching ErrInvalidOption.
func After(upstream string, m Mapping) Option {
	name := fmt.Sprintf("After(%q, %s)", upstream, m.name)
	return policy(name, func(c *catchUpSettings) error {
		if m.f == nil {
			return invalidOption("%s: no mapping (use SamePeriod, Within or MapFunc)", name)
		}
		if err := idemstore.ValidateJob(upstream); err != nil {
			return invalidOption("%s: %v", name, err)
		}
		c.Deps = append(c.Deps, catchUpDep{Job: upstream, Mapping: m.name, Map: m.f, SameCalendar: m.same})
		return nil
	})
}

// AfterPrevious makes each period of the job wait until the job's own
// previous period is done (or skipped): strict order, where a period's
// work needs the one before it (a running balance). Catch-up runs a job's
// periods oldest first anyway; what AfterPrevious adds is that a period
// never starts while the one before it is unsettled — failed, parked,
// unknown, or held by another replica's run (with ContinueAfterFailure,
// or [Run] of a single period, it might). A period at or before the
// job's cursor counts as settled: the job's first period does not wait
// for the one before the job began.
func AfterPrevious() Option {
	return policy("AfterPrevious", func(c *catchUpSettings) error {
		c.Deps = append(c.Deps, catchUpDep{Mapping: "previous period", Map: func(p Period, own Schedule) []string {
			return []string{own.Prev(p).Name}
		}})
		return nil
	})
}

// A Wait is one upstream period a period waits for.
type Wait struct {
	Key    Key
	Status Status // its record's status; "" when the store has none
}

func (w Wait) String() string {
	if w.Status == "" {
		return w.Key.String() + " (not run yet)"
	}
	return w.Key.String() + " (" + string(w.Status) + ")"
}

// waits is what the period p of job waits for under deps; an error is
// the store's.
//
// The job's own period at or before its cursor counts as settled
// (AfterPrevious: the cursor's meaning is that every due period up to it
// is settled, or before the job began). So does an upstream's period
// (After) that has no record and is at or before the upstream's cursor
// or retention horizon: before the upstream began (its Since, or its
// first catch-up's latest due period), or pruned. The upstream's
// catch-up never goes back before its cursor, so such a period would be
// waited for forever. One with a record that is not done is waited for,
// with its status.
func waits(ctx context.Context, s idemstore.CatchUpStore, job, cursor string, sched Schedule, p Period, deps []catchUpDep) (Waits, error) {
	var w Waits
	for _, d := range deps {
		up := d.Job
		if up == "" {
			up = job
		}
		var upState *idemstore.JobState // read at the first upstream period found not done
		for _, name := range d.Map(p, sched) {
			if d.Job == "" && cursor != "" && name <= cursor {
				continue // the job's own period at or before its cursor: settled, or before the job began
			}
			key := Key{Job: up, Period: name}
			rec, ok, err := s.Lookup(ctx, key)
			if err != nil {
				return nil, err
			}
			if ok && (rec.Status == StatusDone || rec.Status == StatusSkipped) {
				continue
			}
			if d.Job != "" && !ok {
				if upState == nil {
					js, err := s.Job(ctx, up)
					if err != nil {
						return nil, err
					}
					upState = &js
				}
				if (upState.Cursor != "" && name <= upState.Cursor) || (upState.Horizon != "" && name <= upState.Horizon) {
					continue // never run, at or before the upstream's cursor (before its Since, say) or horizon: settled
				}
			}
			switch {
			case ok:
				w = append(w, Wait{Key: key, Status: rec.Status})
			default:
				w = append(w, Wait{Key: key})
			}
		}
	}
	return w, nil
}

// Waits is what a period waits for.
type Waits []Wait

// String lists the first three waits, and how many more there are.
func (w Waits) String() string {
	const shown = 3
	parts := make([]string, 0, shown)
	for i, x := range w {
		if i == shown {
			break
		}
		parts = append(parts, x.String())
	}
	s := strings.Join(parts, ", ")
	if len(w) > shown {
		s += fmt.Sprintf(" and %d more", len(w)-shown)
	}
	return s
}

// WaitingFor is what period p of job waits for, now, under the dependencies
// among opts (After, AfterPrevious: the options its Run is given; the
// others are ignored): the upstream periods not done, as Run would find
// them; none when p may run. It is for tools that show a job's state (the
// idem command's show and ls); Run itself needs no call to it.
func WaitingFor(ctx context.Context, s Store, job string, sched Schedule, p Period, opts ...Option) (Waits, error) {
	cs, err := storeAs[idemstore.CatchUpStore]("WaitingFor", s)
	if err != nil {
		return nil, err
	}
	cfg := configure(cs, callCatchUp, opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	cu := cfg.catchUp
	js, err := cs.Job(ctx, job)
	if err != nil {
		return nil, err
	}
	return waits(ctx, cs, job, js.Cursor, sched, p, cu.Deps)
}
