package main

// The Scheduler's lines are measurements, not comparisons:
//
//	scheduler_idle_cpu       CPU seconds per hour (user+system, getrusage over a window) of a
//	                         process whose Scheduler has 1000 daily jobs, none due
//	scheduler_wake_latency   from a period's due time to its fn's start, p50 and p99, for 10
//	                         jobs of one-second periods over a SQLite ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/bench/internal/rusage"
)

// tempLedger opens a ledger in a new temporary directory; done closes it
// and removes the directory.
func tempLedger() (l *idem.Ledger, done func(), err error) {
	dir, err := os.MkdirTemp("", "idem-bench-sched-")
	if err != nil {
		return nil, nil, err
	}
	l, err = idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return l, func() { l.Close(); os.RemoveAll(dir) }, nil
}

// startScheduler runs s until the returned stop is called.
func startScheduler(s *idem.Scheduler) (stop func() error) {
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	return func() error {
		if err := s.Shutdown(context.Background()); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, idem.ErrSchedulerClosed) {
			return err
		}
		return nil
	}
}

func schedulerIdleCPU(ctx context.Context, cfg config) (result, error) {
	l, done, err := tempLedger()
	if err != nil {
		return result{}, err
	}
	defer done()
	const jobs = 1000
	s := idem.NewScheduler(l)
	fn := func(context.Context, idem.Period) error { return nil }
	for i := range jobs {
		if err := s.Add(fmt.Sprintf("job%04d", i), idem.Daily(time.UTC), fn); err != nil {
			return result{}, err
		}
	}
	stop := startScheduler(s)
	defer stop()
	// The first looks: each job runs yesterday. Then none is due until
	// midnight (a window across midnight UTC measures that too).
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st := s.Status()
		busy := 0
		for _, j := range st.Jobs {
			if j.Running || j.LastOutcome == 0 {
				busy++
			}
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("%d of %d jobs had not had their first look after 5 minutes", busy, jobs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before, err := rusage.CPUTime()
	if err != nil {
		return result{skipped: err.Error()}, nil
	}
	start := time.Now()
	time.Sleep(cfg.idleWindow)
	after, _ := rusage.CPUTime()
	window := time.Since(start)
	perHour := (after - before).Seconds() / window.Hours()
	return result{text: fmt.Sprintf("%.3f CPU s/hour for %d idle jobs (getrusage over %s)", perHour, jobs, window.Round(time.Second))}, nil
}

func schedulerWakeLatency(ctx context.Context, cfg config) (result, error) {
	l, done, err := tempLedger()
	if err != nil {
		return result{}, err
	}
	defer done()
	const jobs = 10
	var mu sync.Mutex
	var lat []time.Duration
	measuring := false
	fn := func(_ context.Context, p idem.Period) error {
		d := time.Since(p.End)
		mu.Lock()
		defer mu.Unlock()
		if measuring {
			lat = append(lat, d)
		}
		return nil
	}
	s := idem.NewScheduler(l, idem.WithMaxRunning(jobs))
	for i := range jobs {
		if err := s.Add(fmt.Sprintf("tick%02d", i), seconds{}, fn); err != nil {
			return result{}, err
		}
	}
	stop := startScheduler(s)
	time.Sleep(2 * time.Second) // past the first looks
	mu.Lock()
	measuring = true
	mu.Unlock()
	time.Sleep(time.Duration(cfg.wakeSeconds) * time.Second)
	mu.Lock()
	measuring = false
	got := slices.Clone(lat)
	mu.Unlock()
	if err := stop(); err != nil {
		return result{}, err
	}
	if len(got) == 0 {
		return result{}, errors.New("no period ran")
	}
	slices.Sort(got)
	q := func(f float64) time.Duration { return got[min(len(got)-1, int(f*float64(len(got))))] }
	return result{text: fmt.Sprintf("p50=%s p99=%s (due time to fn start, %d periods of %d one-second jobs, SQLite ledger)",
		q(0.50).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), len(got), jobs)}, nil
}

// seconds is the schedule of one-second periods, named by their start in
// Unix seconds (zero-padded, so that names sort in time order).
type seconds struct{}

func (seconds) period(sec int64) idem.Period {
	return idem.Period{Name: fmt.Sprintf("%012d", sec), Start: time.Unix(sec, 0).UTC(), End: time.Unix(sec+1, 0).UTC()}
}
func (s seconds) At(t time.Time) idem.Period {
	sec := t.Unix()
	if t.Before(time.Unix(sec, 0)) {
		sec--
	}
	return s.period(sec)
}
func (s seconds) Next(p idem.Period) idem.Period { return s.period(p.Start.Unix() + 1) }
func (s seconds) Prev(p idem.Period) idem.Period { return s.period(p.Start.Unix() - 1) }
func (s seconds) Parse(name string) (idem.Period, error) {
	sec, err := strconv.ParseInt(name, 10, 64)
	if err != nil || len(name) != 12 {
		return idem.Period{}, fmt.Errorf("%w: %q", idem.ErrInvalidPeriod, name)
	}
	return s.period(sec), nil
}
func (seconds) String() string { return "seconds@UTC" }
