package prom_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/prom"
	"github.com/prometheus/client_golang/prometheus"
)

// TestSchedulerLagGauges: idem_scheduler_lag_seconds, idem_scheduler_ready
// and idem_scheduler_lagging follow the Scheduler's Status. A job whose
// period hangs past its WithLagTolerance is reported lagging and unready
// with its lag; a job beside it that keeps up is ready with no lag; once
// the hung period returns, the job is ready again.
func TestSchedulerLagGauges(t *testing.T) {
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	started, release := make(chan struct{}, 1), make(chan struct{})
	hang := func(ctx context.Context, p idem.Period) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return nil
	}
	ok := func(context.Context, idem.Period) error { return nil }
	if err := s.Add("slow", idem.Hourly(time.UTC), hang, idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("quick", idem.Hourly(time.UTC), ok, idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.WatchScheduler(s)
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	released := false
	defer func() {
		if !released {
			close(release)
		}
		_ = s.Shutdown(context.Background())
		<-done
	}()
	testwait.Recv(t, started, "the slow job's 09:00 period to start")
	testwait.Until(t, func() bool { return s.Status().Jobs[1].LastSuccess != (time.Time{}) }, "the quick job's 09:00 period to be done")
	// 10:30: the 09:00 period has been due since 10:00, 30 minutes, past
	// the tolerance of 10.
	gather(t, reg).expect(t, []series{
		{"idem_scheduler_lag_seconds", "job=slow", 1800},
		{"idem_scheduler_ready", "job=slow", 0},
		{"idem_scheduler_lagging", "job=slow", 1},
		{"idem_scheduler_lag_seconds", "job=quick", 0},
		{"idem_scheduler_ready", "job=quick", 1},
		{"idem_scheduler_lagging", "job=quick", 0},
	})
	close(release)
	released = true
	schedtest.Idle(t, s, clk.Now())
	gather(t, reg).expect(t, []series{
		{"idem_scheduler_lag_seconds", "job=slow", 0},
		{"idem_scheduler_ready", "job=slow", 1},
		{"idem_scheduler_lagging", "job=slow", 0},
	})
}

// TestSchedulerUnknownIsNotLagging: a job unready because a period's
// outcome is unknown is reported unready but not lagging: the unknown-key
// alert, not the lateness one, says what to do.
func TestSchedulerUnknownIsNotLagging(t *testing.T) {
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	fail := func(context.Context, idem.Period) error { return context.DeadlineExceeded }
	if err := s.Add("pay", idem.Hourly(time.UTC), fail, idem.AtMostOnce(), idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.WatchScheduler(s)
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer func() {
		_ = s.Shutdown(context.Background())
		<-done
	}()
	testwait.Until(t, func() bool { return s.Status().Jobs[0].Unknown > 0 }, "the pay job's period to be unknown")
	gather(t, reg).expect(t, []series{
		{"idem_scheduler_ready", "job=pay", 0},
		{"idem_scheduler_lagging", "job=pay", 0},
	})
}
