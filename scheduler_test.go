package idem_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
)

// calls records the periods a job's fn ran for, in order.
type calls struct {
	mu sync.Mutex
	ps []string
}

func (c *calls) fn(_ context.Context, p idem.Period) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ps = append(c.ps, p.Name)
	return nil
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ps)
}

func wantPeriods(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestSchedulerRunsDuePeriods(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "first look", c.get(), "2026-03-01T09:00Z")
	st := s.Status().Jobs[0]
	if got, want := st.NextDue, schedtest.UTC(t, "2026-03-01T11:00:00Z"); !got.Equal(want) {
		t.Errorf("NextDue: got %v, want %v", got, want)
	}
	if st.LastOutcome != idem.Ran || st.LastPeriod != "2026-03-01T09:00Z" || st.Running {
		t.Errorf("status after the first look: %+v", st)
	}
	clk.Advance(30 * time.Minute) // 11:00: 10:00 is due
	schedtest.Idle(t, s, clk.Now())
	clk.Advance(59 * time.Minute) // 11:59: nothing more
	schedtest.Idle(t, s, clk.Now())
	clk.Advance(time.Minute) // 12:00
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after two hours", c.get(), "2026-03-01T09:00Z", "2026-03-01T10:00Z", "2026-03-01T11:00Z")
	for _, p := range c.get() {
		if rec := mustLookup(t, l, idem.Key{Job: "hourly", Period: p}); rec.Status != idem.StatusDone {
			t.Errorf("%s: %s, want done", p, rec.Status)
		}
	}
}

// openLedgerAt is a schedtest.Opener of the SQLite ledger at path.
func openLedgerAt(_ context.Context, path string) (idem.Store, func(), error) {
	l, err := idem.OpenLedger(path)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}

// TestSchedulerReplicas: three Schedulers (three replicas of a service),
// each with its own handle on one SQLite ledger, run each period of two
// jobs exactly once over two days of hours.
func TestSchedulerReplicas(t *testing.T) {
	dir := t.TempDir()
	openLedger(t, dir)
	schedtest.Goroutines(t, filepath.Join(dir, "ledger.db"), openLedgerAt)
}

// TestSchedulerReplicaProcesses: three replicas in processes of their own
// on one SQLite ledger run each period once; the one SIGKILLed in the
// middle of a period leaves it to another, which finishes it.
func TestSchedulerReplicaProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if !idemtest.IsChild(t) {
		openLedger(t, filepath.Dir(path))
	}
	schedtest.Processes(t, path, openLedgerAt)
}

// TestSchedulerSuspend: a machine suspended for three days wakes with its
// wall clock three days on and its timers where they were; within a
// Recheck the Scheduler runs the three missed days, in order.
func TestSchedulerSuspend(t *testing.T) {
	l := openLedger(t, t.TempDir())
	sh := schedtest.Location(t, "Asia/Shanghai")
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 2, 0, 0, 0, sh))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("settle", idem.Daily(sh), c.fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "first look", c.get(), "2026-02-28")
	clk.Jump(72 * time.Hour) // suspended: no timer fired
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after the suspend", c.get(), "2026-02-28", "2026-03-01", "2026-03-02", "2026-03-03")
}

// TestSchedulerClockBack: a wall clock set back three days runs nothing
// again; the next new period runs once, when it is due.
func TestSchedulerClockBack(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-05T00:10:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var daily, hourly calls
	if err := s.Add("daily", idem.Daily(time.UTC), daily.fn); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("hourly", idem.Hourly(time.UTC), hourly.fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "daily, first look", daily.get(), "2026-03-04")
	wantPeriods(t, "hourly, first look", hourly.get(), "2026-03-04T23:00Z")
	clk.Jump(-72 * time.Hour)
	for range 3 * 60 { // three hours of rechecks on the clock set back
		clk.Advance(time.Minute)
		schedtest.Idle(t, s, clk.Now())
	}
	wantPeriods(t, "daily, clock back", daily.get(), "2026-03-04")
	wantPeriods(t, "hourly, clock back", hourly.get(), "2026-03-04T23:00Z")
	clk.Jump(72*time.Hour - 3*time.Hour + 50*time.Minute) // 2026-03-05T01:00Z
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "daily, clock forward again", daily.get(), "2026-03-04")
	wantPeriods(t, "hourly, clock forward again", hourly.get(), "2026-03-04T23:00Z", "2026-03-05T00:00Z")
}

// TestSchedulerDSTHourly walks the hourly periods of the DST days of New
// York, London and Lord Howe hour by hour (wall and timers together): each
// period the schedule has runs once, in order; the hour a spring-forward
// skips has none, the hour a fall-back repeats has two.
func TestSchedulerDSTHourly(t *testing.T) {
	for zone, days := range map[string][]string{
		"America/New_York":    {"2026-03-08", "2026-11-01"},
		"Europe/London":       {"2026-03-29", "2026-10-25"},
		"Australia/Lord_Howe": {"2026-04-05", "2026-10-04"},
	} {
		for _, day := range days {
			t.Run(zone+"/"+day, func(t *testing.T) {
				loc := schedtest.Location(t, zone)
				sched := idem.Hourly(loc)
				start := schedtest.LocalDay(t, day, loc).Add(-12*time.Hour + 30*time.Minute)
				clk := schedtest.NewClock(start)
				s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
				var c calls
				if err := s.Add("hourly", sched, c.fn); err != nil {
					t.Fatal(err)
				}
				startScheduler(t, s)
				for clk.Now().Before(start.Add(25 * time.Hour)) {
					schedtest.Idle(t, s, clk.Now())
					clk.Advance(10 * time.Minute)
				}
				schedtest.Idle(t, s, clk.Now())
				var want []string
				for p := idem.LastPeriod(sched, start); p.End.Before(clk.Now()) || p.End.Equal(clk.Now()); p = sched.Next(p) {
					want = append(want, p.Name)
				}
				wantPeriods(t, "hourly periods", c.get(), want...)
				if n := len(want); n != 25+1 && n != 24+1 && n != 26+1 {
					t.Errorf("%d periods in 25 hours", n)
				}
			})
		}
	}
}

// TestSchedulerShutdownMidRun: Shutdown while a period runs lets it finish
// and records its done mark; a Shutdown whose deadline passes cancels fn,
// records the failure, and the next Scheduler on the ledger runs the
// period again: nothing is lost.
func TestSchedulerShutdownMidRun(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
			dir := t.TempDir()
			clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
			s := idem.NewScheduler(openLedger(t, dir), idem.WithClock(clk))
			started, release := make(chan string, 1), make(chan struct{})
			var c calls
			fn := func(ctx context.Context, p idem.Period) error {
				started <- p.Name
				select {
				case <-release:
					return c.fn(ctx, p)
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			if err := s.Add("hourly", idem.Hourly(time.UTC), fn); err != nil {
				t.Fatal(err)
			}
			runErr := make(chan error, 1)
			go func() { runErr <- s.Run(context.Background()) }()
			period := testwait.Recv(t, started, "the first period to start")
			shut := make(chan error, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { shut <- s.Shutdown(ctx) }()
			testwait.Until(t, func() bool {
				// An Add before Shutdown began is accepted, and its job
				// may run: not one of c's.
				err := s.Add("late", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
				return errors.Is(err, idem.ErrSchedulerClosed)
			},
				"Add to be refused once Shutdown began")
			if deadline {
				cancel()
			} else {
				close(release)
			}
			err := testwait.Recv(t, shut, "Shutdown to return")
			if deadline != (err != nil) {
				t.Fatalf("Shutdown: %v", err)
			}
			if err := testwait.Recv(t, runErr, "Run to return"); !errors.Is(err, idem.ErrSchedulerClosed) {
				t.Fatalf("Run: %v, want ErrSchedulerClosed", err)
			}
			l := openLedger(t, dir)
			rec := mustLookup(t, l, idem.Key{Job: "hourly", Period: period})
			if !deadline {
				if rec.Status != idem.StatusDone {
					t.Fatalf("%s: %s, want done", period, rec.Status)
				}
				wantPeriods(t, "ran", c.get(), period)
				return
			}
			if rec.Status != idem.StatusFailed {
				t.Fatalf("%s: %s, want failed (fn cancelled)", period, rec.Status)
			}
			// The next Scheduler runs it, once its backoff allows.
			s2 := idem.NewScheduler(l, idem.WithClock(clk))
			if err := s2.Add("hourly", idem.Hourly(time.UTC), c.fn); err != nil {
				t.Fatal(err)
			}
			startScheduler(t, s2)
			for i := 0; ; i++ {
				schedtest.Idle(t, s2, clk.Now())
				if len(c.get()) > 0 || i == 10 {
					break
				}
				clk.Advance(time.Second) // the backoff
			}
			wantPeriods(t, "ran by the next scheduler", c.get(), period)
		})
	}
}

// TestSchedulerOverlap: by default a job's next period waits for the one
// running; with RunOverlapping it starts at once.
func TestSchedulerOverlap(t *testing.T) {
	for _, overlapping := range []bool{false, true} {
		t.Run(fmt.Sprintf("overlapping=%v", overlapping), func(t *testing.T) {
			clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
			s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
			started := make(chan string, 4)
			release := make(chan struct{})
			fn := func(ctx context.Context, p idem.Period) error {
				started <- p.Name
				<-release
				return nil
			}
			var opts []idem.Option
			if overlapping {
				opts = append(opts, idem.RunOverlapping())
			}
			if err := s.Add("hourly", idem.Hourly(time.UTC), fn, opts...); err != nil {
				t.Fatal(err)
			}
			startScheduler(t, s)
			if got := testwait.Recv(t, started, "the first period"); got != "2026-03-01T09:00Z" {
				t.Fatalf("first: %s", got)
			}
			clk.Advance(30 * time.Minute) // 10:00 is due
			if overlapping {
				if got := testwait.Recv(t, started, "the overlapping period"); got != "2026-03-01T10:00Z" {
					t.Fatalf("overlapping: %s", got)
				}
			} else {
				testwait.Until(t, func() bool { return s.Status().Checked.Equal(clk.Now()) }, "the scheduler to look at 11:00")
				select {
				case p := <-started:
					t.Fatalf("%s started while the earlier period ran", p)
				default:
				}
			}
			close(release)
			if !overlapping {
				if got := testwait.Recv(t, started, "the next period"); got != "2026-03-01T10:00Z" {
					t.Fatalf("next: %s", got)
				}
			}
			schedtest.Idle(t, s, clk.Now())
		})
	}
}

// TestSchedulerMaxRunning: with WithMaxRunning(1), a second due job waits,
// deferred, until the first ends.
func TestSchedulerMaxRunning(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk), idem.WithMaxRunning(1))
	started, release := make(chan string, 2), make(chan struct{})
	fn := func(ctx context.Context, p idem.Period) error {
		info, _ := idem.InfoFrom(ctx)
		started <- info.Key.Job
		<-release
		return nil
	}
	for _, job := range []string{"a", "b"} {
		if err := s.Add(job, idem.Hourly(time.UTC), fn); err != nil {
			t.Fatal(err)
		}
	}
	startScheduler(t, s)
	first := testwait.Recv(t, started, "a first job")
	testwait.Until(t, func() bool {
		for _, j := range s.Status().Jobs {
			if j.Job != first && strings.Contains(j.Deferred, "WithMaxRunning") {
				return true
			}
		}
		return false
	}, "the other job to be deferred")
	close(release)
	if second := testwait.Recv(t, started, "the second job"); second == first {
		t.Fatalf("%s ran twice", first)
	}
	schedtest.Idle(t, s, clk.Now())
}

// TestSchedulerJitter: a job's runs start within its jitter after the due
// time, never before.
func TestSchedulerJitter(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn, idem.WithJitter(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	st := s.Status().Jobs[0]
	due := schedtest.UTC(t, "2026-03-01T11:00:00Z")
	if st.NextRun.Before(due) || !st.NextRun.Before(due.Add(10*time.Minute)) {
		t.Fatalf("NextRun %v, want in [%v, +10m)", st.NextRun, due)
	}
	clk.Advance(st.NextRun.Sub(clk.Now()) - time.Nanosecond)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "before the jittered time", c.get(), "2026-03-01T09:00Z")
	clk.Advance(time.Nanosecond)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "at the jittered time", c.get(), "2026-03-01T09:00Z", "2026-03-01T10:00Z")
}

// TestSchedulerCatchUpWindow: after an outage, periods due longer ago than
// the window are recorded skipped; the others run.
func TestSchedulerCatchUpWindow(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn, idem.CatchUpWindow(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	clk.Jump(5 * time.Hour) // 15:30: 10:00 to 14:00 are due
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "ran", c.get(), "2026-03-01T09:00Z", "2026-03-01T13:00Z", "2026-03-01T14:00Z")
	for _, p := range []string{"2026-03-01T10:00Z", "2026-03-01T11:00Z", "2026-03-01T12:00Z"} {
		if rec := mustLookup(t, l, idem.Key{Job: "hourly", Period: p}); rec.Status != idem.StatusSkipped {
			t.Errorf("%s: %s, want skipped", p, rec.Status)
		}
	}
}

// TestSchedulerHealth: with UnreadyWhenParked, a parked period makes the
// job, and the handler, unready; the JSON names it.
func TestSchedulerHealth(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	ok := func(context.Context, idem.Period) error { return nil }
	bad := func(context.Context, idem.Period) error { return idem.Permanent(errors.New("no such account")) }
	if err := s.Add("good", idem.Hourly(time.UTC), ok, idem.WithLagTolerance(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("bad", idem.Hourly(time.UTC), bad); err != nil {
		t.Fatal(err)
	}
	h := s.Handler(idem.UnreadyWhenParked())
	get := func(query string) (int, idem.SchedulerStatus) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz"+query, nil))
		var st idem.SchedulerStatus
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		return rec.Code, st
	}
	if code, _ := get("?live"); code != 503 {
		t.Errorf("live before Run: %d, want 503", code)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	code, st := get("")
	if code != 503 || st.Ready {
		t.Fatalf("ready with a parked period: %d %+v", code, st)
	}
	if j := st.Jobs[1]; j.Job != "bad" || j.Parked != 1 || j.Ready || j.LastOutcome != idem.Parked || !strings.Contains(j.Why, "parked") {
		t.Errorf("bad: %+v", j)
	}
	if j := st.Jobs[0]; !j.Ready || j.LastSuccess.IsZero() || j.Lag != 0 {
		t.Errorf("good: %+v", j)
	}
	if code, _ := get("?live"); code != 200 {
		t.Errorf("live: %d, want 200", code)
	}
}

// TestSchedulerParkedStaysReady: a parked period is an alert, not
// unreadiness: by default the handler answers 200 and Status is ready,
// with the job's parked count in the JSON; a readiness probe must not take
// every replica out of its load balancer for one bad day of data.
func TestSchedulerParkedStaysReady(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	bad := func(context.Context, idem.Period) error { return idem.Permanent(errors.New("no such account")) }
	if err := s.Add("bad", idem.Hourly(time.UTC), bad); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	var st idem.SchedulerStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	if rec.Code != 200 || !st.Ready || !s.Status().Ready {
		t.Fatalf("a parked period: %d %s; want 200 and ready", rec.Code, rec.Body)
	}
	if j := st.Jobs[0]; j.Parked != 1 || !j.Ready || j.LastOutcome != idem.Parked {
		t.Errorf("bad: %+v; want ready with parked 1", j)
	}
}

func TestSchedulerInvalid(t *testing.T) {
	l := openLedger(t, t.TempDir())
	s := idem.NewScheduler(l)
	fn := func(context.Context, idem.Period) error { return nil }
	for name, opt := range map[string]idem.Option{
		"jitter":    idem.WithJitter(-time.Second),
		"tolerance": idem.WithLagTolerance(0),
		"window":    idem.CatchUpWindow(0),
		"lease":     idem.WithLease(0),
	} {
		if err := s.Add("j", idem.Daily(time.UTC), fn, opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if err := s.Add("", idem.Daily(time.UTC), fn); err == nil {
		t.Error("an empty job name was accepted")
	}
	if err := s.Add("j", idem.Daily(time.UTC), fn); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("j", idem.Daily(time.UTC), fn); err == nil || !strings.Contains(err.Error(), "added already") {
		t.Errorf("a second j: %v", err)
	}
	bad := idem.NewScheduler(l, idem.WithMaxRunning(0))
	if err := bad.Run(context.Background()); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("Run with WithMaxRunning(0): %v", err)
	}
	if err := idem.AddTx(s, "tx", idem.Daily(time.UTC), func(context.Context, *struct{}, idem.Period) error { return nil }); err == nil {
		t.Error("AddTx with a Tx type the ledger does not have was accepted")
	}
}

// TestSchedulerDueAfter: a daily job in Shanghai with DueAfter(2h) settles
// yesterday at 02:00, not at midnight.
func TestSchedulerDueAfter(t *testing.T) {
	sh := schedtest.Location(t, "Asia/Shanghai")
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 0, 30, 0, 0, sh))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	var c calls
	if err := s.Add("settle", idem.Daily(sh), c.fn, idem.DueAfter(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "at 00:30", c.get(), "2026-02-27")
	if got, want := s.Status().Jobs[0].NextDue, time.Date(2026, 3, 1, 2, 0, 0, 0, sh); !got.Equal(want) {
		t.Fatalf("NextDue %v, want %v", got, want)
	}
	clk.Advance(time.Hour + 29*time.Minute) // 01:59
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "at 01:59", c.get(), "2026-02-27")
	clk.Advance(time.Minute) // 02:00
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "at 02:00", c.get(), "2026-02-27", "2026-02-28")
}

// TestSchedulerClockForwardCap: a clock that jumps forward makes every
// period in between due; the job's CatchUpAll cap bounds each catch-up,
// and the next ones, at once, run the rest, in order.
func TestSchedulerClockForwardCap(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn, idem.CatchUpAll(2)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	clk.Jump(5 * time.Hour) // 15:30: 10:00 to 14:00 are due
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	// Two per catch-up: without the next ones at once, 12:00 to 14:00
	// would wait for the next hour.
	wantPeriods(t, "ran", c.get(), "2026-03-01T09:00Z", "2026-03-01T10:00Z", "2026-03-01T11:00Z",
		"2026-03-01T12:00Z", "2026-03-01T13:00Z", "2026-03-01T14:00Z")
}

// TestSchedulerRetriesAtBackoff: a period whose fn failed is looked at
// again when its backoff ends, not at the next due time; a job added while
// the Scheduler runs gets its first look at once.
func TestSchedulerRetriesAtBackoff(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	var c calls
	failures := 1
	fn := func(ctx context.Context, p idem.Period) error {
		if failures > 0 {
			failures--
			return errors.New("the database is down")
		}
		return c.fn(ctx, p)
	}
	if err := s.Add("daily", idem.Daily(time.UTC), fn, idem.OneAttempt(), idem.WithBackoff(idem.Constant(10*time.Second))); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	st := s.Status().Jobs[0]
	if want := clk.Now().Add(10 * time.Second); !st.NextRun.Equal(want) || st.LastOutcome != idem.BackingOff {
		t.Fatalf("after a failure: NextRun %v, outcome %v; want %v, backing_off", st.NextRun, st.LastOutcome, want)
	}
	clk.Advance(10 * time.Second)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after the backoff", c.get(), "2026-02-28")

	var late calls
	if err := s.Add("late", idem.Hourly(time.UTC), late.fn); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool { return len(late.get()) == 1 }, "the job added while running to have its first look")
	wantPeriods(t, "added while running", late.get(), "2026-03-01T09:00Z")
}

// TestSchedulerRunContextEnds: when Run's context ends, running fns are
// cancelled at once, their ends recorded, and Run returns the context's
// cause; the Scheduler does not run again. A Scheduler shut down before it
// ran does not run either.
func TestSchedulerRunContextEnds(t *testing.T) {
	dir := t.TempDir()
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, dir), idem.WithClock(clk))
	started := make(chan string, 1)
	fn := func(ctx context.Context, p idem.Period) error {
		started <- p.Name
		<-ctx.Done()
		return context.Cause(ctx)
	}
	if err := s.Add("hourly", idem.Hourly(time.UTC), fn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stopped := errors.New("the service is stopping")
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	period := testwait.Recv(t, started, "the first period to start")
	cancel(stopped)
	if err := testwait.Recv(t, runErr, "Run to return"); !errors.Is(err, stopped) {
		t.Fatalf("Run: %v, want the context's cause", err)
	}
	if rec := mustLookup(t, openLedger(t, dir), idem.Key{Job: "hourly", Period: period}); rec.Status != idem.StatusFailed || !strings.Contains(rec.LastError, stopped.Error()) {
		t.Errorf("%s: %s (%q), want failed with the cause", period, rec.Status, rec.LastError)
	}
	if err := s.Run(context.Background()); !errors.Is(err, idem.ErrSchedulerClosed) {
		t.Errorf("a second Run: %v, want ErrSchedulerClosed", err)
	}
	never := idem.NewScheduler(openLedger(t, dir))
	if err := never.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := never.Run(context.Background()); !errors.Is(err, idem.ErrSchedulerClosed) {
		t.Errorf("Run after Shutdown: %v, want ErrSchedulerClosed", err)
	}
}

// TestSchedulerLagTolerance: a job whose due period stays unsettled longer
// than its tolerance makes the Scheduler unready.
func TestSchedulerLagTolerance(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	fail := func(context.Context, idem.Period) error { return errors.New("upstream is down") }
	if err := s.Add("hourly", idem.Hourly(time.UTC), fail, idem.OneAttempt(),
		idem.WithBackoff(idem.Constant(time.Hour)), idem.WithLagTolerance(45*time.Minute)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	st := s.Status()
	if j := st.Jobs[0]; !st.Ready || j.Lag != 30*time.Minute { // 09:00 was due at 10:00
		t.Fatalf("at 10:30: ready %v, lag %v; want ready, 30m", st.Ready, j.Lag)
	}
	clk.Advance(20 * time.Minute)
	schedtest.Idle(t, s, clk.Now())
	st = s.Status()
	if j := st.Jobs[0]; st.Ready || j.Ready || !strings.Contains(j.Why, "lagging 50m") {
		t.Fatalf("at 10:50: %+v; want unready, lagging 50m", st)
	}
}

// TestSchedulerAddTx: a transactional job's business write and its
// period's done mark commit together.
func TestSchedulerAddTx(t *testing.T) {
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().Exec(`CREATE TABLE rollup(hour TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	fn := func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO rollup(hour) VALUES (?)`, p.Name)
		return err
	}
	if err := idem.AddTx(s, "rollup", idem.Hourly(time.UTC), fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	clk.Advance(time.Hour)
	schedtest.Idle(t, s, clk.Now())
	var hours []string
	rows, err := l.DB().Query(`SELECT hour FROM rollup ORDER BY hour`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		hours = append(hours, h)
	}
	wantPeriods(t, "rows", hours, "2026-03-01T09:00Z", "2026-03-01T10:00Z")
	for _, h := range hours {
		if rec := mustLookup(t, l, idem.Key{Job: "rollup", Period: h}); rec.Status != idem.StatusDone {
			t.Errorf("%s: %s, want done", h, rec.Status)
		}
	}
}

// TestSchedulerWakeOnReset: three replicas in processes of their own on
// one SQLite ledger with a daily job whose period is parked; a reset from
// another process is run by one of them within seconds (idem.SchedulerWakePoll),
// not at the next day's due time, and exactly once.
func TestSchedulerWakeOnReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if !idemtest.IsChild(t) {
		openLedger(t, filepath.Dir(path))
	}
	schedtest.WakeProcesses(t, path, openLedgerAt)
}

// TestSchedulerRerunReplicas: three Scheduler replicas in their own
// processes on one ledger file see one re-run request of a done daily
// period (sent twice): one of them runs it within
// schedtest.WakeBound, at revision 1, exactly once.
func TestSchedulerRerunReplicas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if !idemtest.IsChild(t) {
		openLedger(t, filepath.Dir(path))
	}
	schedtest.RerunProcesses(t, path, openLedgerAt)
}
