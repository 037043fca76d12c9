package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/spec"
	"github.com/idemgo/idem/idemstore"
	"github.com/spf13/cobra"
)

// waitFlags are the flags of show and ls that say what a job's periods
// wait for: --after, as given to 'idem run', with its --schedule and --tz.
type waitFlags struct {
	after    []string
	schedule string
	tz       string
}

func (w *waitFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&w.after, "after", nil, "the job's --after, as given to 'idem run' (repeatable): say what a period that is not done waits for")
	f.StringVar(&w.schedule, "schedule", "", "the job's --schedule, as given to 'idem run' (with --after)")
	f.StringVar(&w.tz, "tz", "Local", "the job's time zone, as given to 'idem run' (with --after)")
}

// jobDeps is a job's dependencies, read from waitFlags.
type jobDeps struct {
	sched idem.Schedule
	opts  []idem.Option
}

// parse returns job's dependencies; nil without --after.
func (w *waitFlags) parse(job string) (*jobDeps, error) {
	if len(w.after) == 0 {
		if w.schedule != "" {
			return nil, usageError(errors.New("--schedule is for --after: say what the job waits for"))
		}
		return nil, nil
	}
	if w.schedule == "" {
		return nil, usageError(errors.New("--after needs the job's --schedule (and --tz), as given to idem run"))
	}
	loc, err := time.LoadLocation(w.tz)
	if err != nil {
		return nil, flagError("--tz", err)
	}
	sched, err := parseSchedule(w.schedule, loc)
	if err != nil {
		return nil, usageError(err) // names --schedule
	}
	d := &jobDeps{sched: sched}
	for _, v := range w.after {
		o, err := spec.After(v, job, loc)
		if err != nil {
			return nil, flagError("--after", err)
		}
		d.opts = append(d.opts, o)
	}
	return d, nil
}

// waiting says what the period of key waits for: "" when nothing.
func (d *jobDeps) waiting(ctx context.Context, s idem.Store, key idem.Key) (string, error) {
	p, err := d.sched.Parse(key.Period)
	if err != nil {
		return "", usageError(fmt.Errorf("%s: not a period of --schedule %s: %w", key.Period, d.sched, err))
	}
	w, err := idem.WaitingFor(ctx, s, key.Job, d.sched, p, d.opts...)
	if err != nil || len(w) == 0 {
		return "", err
	}
	return w.String(), nil
}

// next is job's next period to settle (the one after its catch-up
// cursor, else the last that ended by now) when it waits: its record
// (Status "" when it has none: waiting claims nothing) and what it waits
// for; nil when it does not wait.
func (d *jobDeps) next(ctx context.Context, s idemstore.CatchUpStore, job string, now time.Time) (*idem.Record, string, error) {
	js, err := s.Job(ctx, job)
	if err != nil {
		return nil, "", err
	}
	p := idem.LastPeriod(d.sched, now)
	if js.Cursor != "" {
		c, err := d.sched.Parse(js.Cursor)
		if err != nil {
			return nil, "", fmt.Errorf("job %s: its cursor %q is not a period of --schedule %s: %w", job, js.Cursor, d.sched, err)
		}
		p = d.sched.Next(c)
	}
	key := idem.Key{Job: job, Period: p.Name}
	rec, ok, err := s.Lookup(ctx, key)
	if err != nil {
		return nil, "", err
	}
	if ok && (rec.Status == idem.StatusDone || rec.Status == idem.StatusSkipped) {
		return nil, "", nil
	}
	w, err := idem.WaitingFor(ctx, s, job, d.sched, p, d.opts...)
	if err != nil || len(w) == 0 {
		return nil, "", err
	}
	if !ok {
		rec = idem.Record{Key: key}
	}
	return &rec, w.String(), nil
}
