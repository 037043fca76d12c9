package idem

import (
	"fmt"
	"strings"
	"time"
)

// checkDeps checks the dependencies of job, about to be added with sched
// (After, AfterPrevious), against the jobs added before: a cycle
// (job waits for itself through others), or SamePeriod between jobs of
// different schedules, is an error matching ErrInvalidOption; a job
// added earlier that waits for job with SamePeriod is checked too. A
// dependency on a job this Scheduler does not run is no error: another
// process may run it (its periods wait, and say so, until it has). Called
// with s.mu held.
func (s *Scheduler) checkDeps(job string, sched Schedule, deps []catchUpDep) error {
	for _, d := range deps {
		up, ok := s.byName[d.Job]
		if ok && d.SameCalendar && up.sched.String() != sched.String() {
			return fmt.Errorf("idem: Scheduler.Add %s: %w: After(%q, SamePeriod()): the jobs' schedules differ (%s, %s): map the periods with Within or MapFunc",
				job, ErrInvalidOption, d.Job, sched, up.sched)
		}
	}
	for _, other := range s.jobs {
		for _, d := range other.cu.Deps {
			if d.Job == job && d.SameCalendar && other.sched.String() != sched.String() {
				return fmt.Errorf("idem: Scheduler.Add %s: %w: job %q waits for it with After(%q, SamePeriod()), but the schedules differ (%s, %s)",
					job, ErrInvalidOption, other.name, job, other.sched, sched)
			}
		}
	}
	// A cycle: a path from one of job's upstreams back to job.
	var path []string
	seen := map[string]bool{}
	var reaches func(name string) bool
	reaches = func(name string) bool {
		if name == job {
			return true
		}
		j, ok := s.byName[name]
		if !ok || seen[name] {
			return false
		}
		seen[name] = true
		for _, d := range j.cu.Deps {
			if d.Job != "" && reaches(d.Job) {
				path = append(path, d.Job)
				return true
			}
		}
		return false
	}
	for _, d := range deps {
		if d.Job != "" && reaches(d.Job) {
			path = append(path, d.Job)
			cycle := []string{job}
			for i := len(path) - 1; i >= 0; i-- {
				cycle = append(cycle, path[i])
			}
			return fmt.Errorf("idem: Scheduler.Add %s: %w: the dependencies make a cycle: %s",
				job, ErrInvalidOption, strings.Join(cycle, " waits for "))
		}
	}
	return nil
}

// wakeDependents looks at once at the jobs that wait for a period of
// upstream, whose catch-up has just settled some. Called with s.mu held.
func (s *Scheduler) wakeDependents(upstream string, now time.Time) {
	for _, j := range s.jobs {
		if j.st.Waiting == "" || j.catching {
			continue
		}
		for _, d := range j.cu.Deps {
			if d.Job == upstream {
				s.schedule(j, now)
				break
			}
		}
	}
}

// settledSome reports whether a catch-up settled one of periods now.
func settledSome(periods []PeriodResult) bool {
	for _, pr := range periods {
		if pr.Err == nil && (pr.Outcome == Ran || pr.Outcome == Recovered || pr.Outcome == AlreadyDone || pr.Outcome == Skipped) {
			return true
		}
	}
	return false
}
