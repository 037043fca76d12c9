package spec

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// After is the catch-up dependency an --after value (or a crontab
// line's after:) names: JOB (the same period), JOB/PERIODS (every period
// of JOB's schedule PERIODS inside this one, in loc), or previous (the
// job's own previous period).
func After(v, job string, loc *time.Location) (idem.Option, error) {
	if v == "previous" {
		return idem.AfterPrevious(), nil
	}
	up, m, err := ParseAfter(v, job, loc)
	if err != nil {
		return nil, err
	}
	return idem.After(up, m), nil
}

// ParseAfter reads JOB or JOB/PERIODS, a dependency of job on the periods
// of another job (as --after of 'idem run' and 'idem ui' take it): the
// upstream job and the mapping of job's periods to its.
func ParseAfter(v, job string, loc *time.Location) (string, idem.Mapping, error) {
	up, periods, within := strings.Cut(v, "/")
	if err := idemstore.ValidateJob(up); err != nil {
		return "", idem.Mapping{}, fmt.Errorf("%q: %w", v, err)
	}
	if up == job {
		return "", idem.Mapping{}, fmt.Errorf("%q: a job cannot wait for its own periods (use previous)", v)
	}
	if !within {
		return up, idem.SamePeriod(), nil
	}
	sched, ok := NamedSchedule(periods, loc)
	if !ok {
		return "", idem.Mapping{}, fmt.Errorf("%q: %q is not hourly, daily, weekly or monthly", v, periods)
	}
	return up, idem.Within(sched), nil
}
