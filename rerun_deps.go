package idem

// Re-runs with their dependents: RerunWithDependents adds to a re-run
// request the periods of the jobs downstream (After, AfterPrevious) that
// depend on the periods re-run, in one request; the catch-up of each
// downstream job runs them only once the upstream's new revision is done
// (runReruns in catchup.go checks the dependencies as for any period).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// JobDeps declares a job to [RerunWithDependents]: its name, its schedule
// and its options (those given to CatchUp or Scheduler.Add), of which
// its dependencies ([After], [AfterPrevious]) count; the others are
// ignored, unless a catch-up option's value is bad.
type JobDeps struct {
	Job      string
	Schedule Schedule
	Options  []Option
}

// RerunWithDependents is [Rerun] of req.Keys and of every period of the
// jobs that depend on them, directly or through other jobs: each period
// of a job in jobs that has a record and that waits, by one of its After
// (or AfterPrevious) dependencies, for a period re-run (req's, or one
// added so), is added to the request, after req's own keys. The request
// is one, as in Rerun: durable, applied to every period or to none (a
// dependent period that is parked or unknown refuses it all, naming the
// period and the command that fits), idempotent by req.RequestID — sent
// again, it re-runs nothing more, not even a dependent period that has
// run since the first sending (the store answers RerunSeen for every key).
//
// Order: a dependent period's re-run waits, unclaimed and with no error
// (outcome [Waiting]), until the periods it depends on are done, and a
// period re-run is not done until its new revision has run: the
// downstream jobs' catch-ups (CatchUp, CatchUpTx, a Scheduler, idem run
// --after) run the mail of a day after the day's new settlement, and a
// monthly report after the 31 days', never before and never failing for
// it. Give each downstream job's catch-up its dependencies, as jobs
// declares them. A dependent period that has no record (not run yet) is
// not named: it runs when it is due, after its upstream, as ever.
//
// jobs needs only the downstream jobs; a job of req.Keys may be among
// them. The store must implement [idemstore.Lister] (to find the
// dependents' records) and [idemstore.Rerunner]; a job declared twice, a
// nil schedule or a bad option is an error matching [ErrInvalidOption],
// before anything is written. A record of a dependent job whose period is
// not one of its schedule's is not a dependent.
func RerunWithDependents(ctx context.Context, s Store, req RerunRequest, jobs ...JobDeps) ([]RerunOutcome, error) {
	r, err := storeAs[idemstore.Rerunner]("RerunWithDependents", s)
	if err != nil {
		return nil, err
	}
	lst, err := storeAs[idemstore.Lister]("RerunWithDependents", s)
	if err != nil {
		return nil, err
	}
	graph, err := depGraph(s, jobs)
	if err != nil {
		return nil, err
	}
	keys, err := dependents(ctx, lst, graph, req.Keys)
	if err != nil {
		return nil, err
	}
	req.Keys = keys
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	return r.Rerun(ctx, req)
}

// depJob is a job of a dependency graph: its schedule and dependencies.
type depJob struct {
	name  string
	sched Schedule
	deps  []catchUpDep
}

// depGraph reads jobs' declarations.
func depGraph(s Store, jobs []JobDeps) ([]depJob, error) {
	var graph []depJob
	seen := map[string]bool{}
	for _, j := range jobs {
		if err := idemstore.ValidateJob(j.Job); err != nil {
			return nil, invalidOption("RerunWithDependents: job %q: %v", j.Job, err)
		}
		if seen[j.Job] {
			return nil, invalidOption("RerunWithDependents: job %q is declared twice", j.Job)
		}
		seen[j.Job] = true
		if j.Schedule == nil {
			return nil, invalidOption("RerunWithDependents: job %q has no schedule", j.Job)
		}
		var deps []Option // the catch-up's options alone: its After and AfterPrevious, its policies
		for _, o := range j.Options {
			if o != nil && o.option().class&classCatchUp != 0 {
				deps = append(deps, o)
			}
		}
		cfg := configure(s, callCatchUp, deps)
		if cfg.err != nil {
			return nil, fmt.Errorf("idem: RerunWithDependents: job %q: %w", j.Job, cfg.err)
		}
		if err := checkCatchUpJob(j.Job, "RerunWithDependents", cfg.catchUp.Deps); err != nil {
			return nil, err
		}
		graph = append(graph, depJob{name: j.Job, sched: j.Schedule, deps: cfg.catchUp.Deps})
	}
	return graph, nil
}

// dependents is keys, then every period of graph's jobs that depends on
// one of them, directly or not, each once, in the order found.
func dependents(ctx context.Context, lst idemstore.Lister, graph []depJob, keys []Key) ([]Key, error) {
	out := slices.Clone(keys)
	in := map[Key]bool{}
	for _, k := range keys {
		in[k] = true
	}
	records := map[string][]Period{} // a dependent job's periods that have a record
	periodsOf := func(j depJob) ([]Period, error) {
		if ps, ok := records[j.name]; ok {
			return ps, nil
		}
		recs, err := lst.List(ctx, idemstore.Filter{Job: j.name})
		if err != nil {
			return nil, err
		}
		ps := []Period{}
		for _, r := range recs {
			if p, err := j.sched.Parse(r.Key.Period); err == nil {
				ps = append(ps, p)
			}
		}
		records[j.name] = ps
		return ps, nil
	}
	for i := 0; i < len(out); i++ {
		up := out[i]
		for _, j := range graph {
			for _, d := range j.deps {
				if d.Job != up.Job && (d.Job != "" || j.name != up.Job) {
					continue
				}
				ps, err := periodsOf(j)
				if err != nil {
					return nil, err
				}
				for _, p := range ps {
					k := Key{Job: j.name, Period: p.Name}
					if !in[k] && slices.Contains(d.Map(p, j.sched), up.Period) {
						in[k] = true
						out = append(out, k)
					}
				}
			}
		}
	}
	return out, nil
}

// RerunWithDependents is [RerunWithDependents] with the jobs of s (those
// added so far, with their schedules and dependencies) as the
// declarations; each job that gets a period to re-run is looked at at
// once. The store is s's.
func (s *Scheduler) RerunWithDependents(ctx context.Context, req RerunRequest) ([]RerunOutcome, error) {
	s.mu.Lock()
	var jobs []JobDeps
	for _, j := range s.jobs {
		jobs = append(jobs, JobDeps{Job: j.name, Schedule: j.sched, Options: catchUpDepOptions(j.cu.Deps)})
	}
	s.mu.Unlock()
	out, err := RerunWithDependents(ctx, s.store, req, jobs...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, o := range out {
		j, ok := s.byName[o.Key.Job]
		switch {
		case !ok || o.State == RerunSeen || j.queued:
		case j.catching:
			j.again = true
		default:
			s.schedule(j, now)
		}
	}
	s.wake()
	return out, nil
}

// catchUpDepOptions are options that declare deps again.
func catchUpDepOptions(deps []catchUpDep) []Option {
	var opts []Option
	for _, d := range deps {
		opts = append(opts, policy("dependency", func(c *catchUpSettings) error {
			c.Deps = append(c.Deps, d)
			return nil
		}))
	}
	return opts
}
