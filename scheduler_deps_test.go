package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
)

// TestSchedulerWakesWaitingJob: in one Scheduler, a job whose period waits
// for another job's (idem.After) says so in its status, is not claimed
// while it waits, and runs as soon as the upstream period is done — on
// the same instant of the fake clock, without waiting for a recheck.
func TestSchedulerWakesWaitingJob(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var mu sync.Mutex
	var order []string
	note := func(job string, p idem.Period) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, job+"/"+p.Name)
	}
	if err := s.Add("mail", idem.Daily(time.UTC), func(_ context.Context, p idem.Period) error {
		note("mail", p)
		return nil
	}, idem.After("settle", idem.SamePeriod())); err != nil {
		t.Fatal(err)
	}
	mailWaits := func() bool {
		for _, j := range s.Status().Jobs {
			// "(not run yet)", or "(running)" when settle claimed its
			// period before mail looked: either way, mail waits.
			if j.Job == "mail" && strings.HasPrefix(j.Waiting, "2026-02-28 waits for settle/2026-02-28 (") {
				return true
			}
		}
		return false
	}
	if err := s.Add("settle", idem.Daily(time.UTC), func(_ context.Context, p idem.Period) error {
		// Hold the settlement until mail has found it not done, so that
		// mail runs only if the settlement's end wakes it.
		testwait.Until(t, mailWaits, "mail's status to say it waits for settle/2026-02-28")
		note("settle", p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	mu.Lock()
	got := strings.Join(order, " ")
	mu.Unlock()
	if got != "settle/2026-02-28 mail/2026-02-28" {
		t.Fatalf("ran %q; want the settlement, then the mail, at the same instant", got)
	}
	rec := mustLookup(t, l, idem.Key{Job: "mail", Period: "2026-02-28"})
	if rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("mail's record %+v: want done at attempt 1 (waiting claimed nothing)", rec)
	}
	for _, j := range s.Status().Jobs {
		if j.Waiting != "" || !j.Ready {
			t.Fatalf("status %+v: nothing waits any more", j)
		}
	}
}

// TestSchedulerRefusesBadDependencies: a cycle among a Scheduler's jobs,
// SamePeriod between jobs of different schedules (whichever is added
// first), and a dependency of a job that runs its periods overlapping
// (outside the catch-up that checks them) are refused when the job is
// added (ErrInvalidOption); a dependency on a job the Scheduler does not
// run is accepted.
func TestSchedulerRefusesBadDependencies(t *testing.T) {
	l := openLedger(t, t.TempDir())
	fn := func(context.Context, idem.Period) error { return nil }
	daily, hourly := idem.Daily(time.UTC), idem.Hourly(time.UTC)
	s := idem.NewScheduler(l)
	if err := s.Add("a", daily, fn, idem.After("b", idem.SamePeriod())); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("b", daily, fn, idem.After("c", idem.SamePeriod())); err != nil {
		t.Fatal(err)
	}
	err := s.Add("c", daily, fn, idem.After("a", idem.SamePeriod()))
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "cycle: c waits for a waits for b waits for c") {
		t.Fatalf("a cycle: %v", err)
	}
	err = s.Add("d", hourly, fn, idem.After("a", idem.SamePeriod()))
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "schedules differ") {
		t.Fatalf("SamePeriod across schedules: %v", err)
	}
	err = s.Add("e", daily, fn, idem.RunOverlapping(), idem.AfterPrevious())
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "RunOverlapping") {
		t.Fatalf("RunOverlapping with a dependency: %v", err)
	}
	s2 := idem.NewScheduler(l)
	if err := s2.Add("report", daily, fn, idem.After("hourly", idem.SamePeriod())); err != nil {
		t.Fatal(err)
	}
	err = s2.Add("hourly", hourly, fn)
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), `job "report" waits for it`) {
		t.Fatalf("the upstream added second, of another schedule: %v", err)
	}
	if err := s2.Add("h2", hourly, fn); err != nil {
		t.Fatal(err)
	}
	if err := s2.Add("d2", daily, fn, idem.After("h2", idem.Within(hourly)), idem.After("elsewhere", idem.SamePeriod())); err != nil {
		t.Fatalf("Within across schedules, and a job run elsewhere: %v", err)
	}
}

// TestSchedulerWaitingAcrossReplicas: mail's Scheduler does not run its
// upstream, another replica's does; whichever looks first, by the next
// recheck mail's period has run, once, after its settlement.
func TestSchedulerWaitingAcrossReplicas(t *testing.T) {
	dir := t.TempDir()
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	fn := func(context.Context, idem.Period) error { return nil }
	mailer := idem.NewScheduler(openLedger(t, dir), idem.WithClock(clk))
	if err := mailer.Add("mail", idem.Daily(time.UTC), fn, idem.After("settle", idem.SamePeriod())); err != nil {
		t.Fatal(err)
	}
	settler := idem.NewScheduler(openLedger(t, dir), idem.WithClock(clk))
	if err := settler.Add("settle", idem.Daily(time.UTC), fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, mailer)
	schedtest.Idle(t, mailer, clk.Now())
	startScheduler(t, settler)
	schedtest.Idle(t, settler, clk.Now())
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, mailer, clk.Now())
	l := openLedger(t, dir)
	mail := mustLookup(t, l, idem.Key{Job: "mail", Period: "2026-02-28"})
	settle := mustLookup(t, l, idem.Key{Job: "settle", Period: "2026-02-28"})
	if mail.Status != idem.StatusDone || mail.Attempt != 1 || settle.Status != idem.StatusDone || mail.Updated.Before(settle.Updated) {
		t.Fatalf("mail %+v, settle %+v; want both done, mail once and after settle", mail, settle)
	}
}
