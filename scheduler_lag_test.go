package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
)

// downStore is a real store that fails, while down is set, as a store
// whose server cannot be reached does.
type downStore struct {
	idemstore.CatchUpStore
	down atomic.Bool
}

var errRefused = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (d *downStore) Job(ctx context.Context, job string) (idemstore.JobState, error) {
	if d.down.Load() {
		return idemstore.JobState{}, errRefused
	}
	return d.CatchUpStore.Job(ctx, job)
}

func (d *downStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if d.down.Load() {
		return idemstore.Claim{}, errRefused
	}
	return d.CatchUpStore.Claim(ctx, req)
}

// healthz is the status code of s's readiness probe.
func healthz(s *idem.Scheduler) int {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	return rec.Code
}

// wantLagging checks that s is unready, lagging lag, with 503 from its
// probe; or ready with lag 0 and 200 when lag is 0.
func wantLagging(t *testing.T, what string, s *idem.Scheduler, lag time.Duration) {
	t.Helper()
	st := s.Status()
	j := st.Jobs[0]
	code := healthz(s)
	if lag == 0 {
		if !st.Ready || j.Lag != 0 || code != 200 {
			t.Fatalf("%s: ready %v, lag %v, /healthz %d; want ready, lag 0, 200 (%+v)", what, st.Ready, j.Lag, code, j)
		}
		return
	}
	if st.Ready || j.Ready || j.Lag != lag || !strings.Contains(j.Why, "lagging") || code != 503 {
		t.Fatalf("%s: ready %v, lag %v, why %q, /healthz %d; want unready, lagging %v, 503 (%+v)", what, st.Ready, j.Lag, j.Why, code, lag, j)
	}
}

// TestSchedulerLagWhileStoreDown: a job with WithLagTolerance turns
// unready once its due period has waited longer than the tolerance while
// its store refuses connections (each catch-up fails at once, with no
// cursor), and ready again once the store is back and the period done.
func TestSchedulerLagWhileStoreDown(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	st := &downStore{CatchUpStore: testledger.As[idemstore.CatchUpStore](t, openLedger(t, t.TempDir()))}
	s := idem.NewScheduler(st, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn, idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantLagging(t, "at 10:30, 09:00 done", s, 0)

	st.down.Store(true)
	clk.Advance(35 * time.Minute) // 11:05: 10:00 due since 11:00
	schedtest.Idle(t, s, clk.Now())
	if j := s.Status().Jobs[0]; !strings.Contains(j.LastError, "connection refused") {
		t.Fatalf("at 11:05 with the store down: last error %q, want connection refused", j.LastError)
	}
	if st := s.Status(); !st.Ready || st.Jobs[0].Lag != 5*time.Minute {
		t.Fatalf("at 11:05: ready %v, lag %v; want ready (within the tolerance), 5m", st.Ready, st.Jobs[0].Lag)
	}
	clk.Advance(6 * time.Minute) // 11:11
	schedtest.Idle(t, s, clk.Now())
	wantLagging(t, "at 11:11 with the store down", s, 11*time.Minute)

	st.down.Store(false)
	clk.Advance(idem.SchedulerRecheck) // its next look: the store answers
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "once the store is back", c.get(), "2026-03-01T09:00Z", "2026-03-01T10:00Z")
	wantLagging(t, "once 10:00 is done", s, 0)
}

// TestSchedulerLagWhileClaimBlocked: while another handle holds the
// SQLite ledger's write lock, the catch-up of a due period waits in its
// claim; the job's lag grows all the same, and the job turns unready past
// its tolerance, whether or not the claim has returned. Ready again once
// the lock is released and the period done.
func TestSchedulerLagWhileClaimBlocked(t *testing.T) {
	dir := t.TempDir()
	l := openLedger(t, dir)
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn, idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantLagging(t, "at 10:30, 09:00 done", s, 0)

	// Another handle on the file takes SQLite's write lock and keeps it.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	locked := true
	defer func() {
		if locked {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
		}
	}()

	clk.Advance(30 * time.Minute) // 11:00: 10:00 is due; its claim waits for the lock
	testwait.Until(t, func() bool { return s.Status().Jobs[0].Running }, "the catch-up of 10:00 to start")
	clk.Advance(5 * time.Minute)
	if st := s.Status(); !st.Ready || st.Jobs[0].Lag != 5*time.Minute {
		t.Fatalf("at 11:05, the claim blocked: ready %v, lag %v; want ready, 5m", st.Ready, st.Jobs[0].Lag)
	}
	clk.Advance(6 * time.Minute) // 11:11
	wantLagging(t, "at 11:11, the claim blocked", s, 11*time.Minute)
	t.Logf("catch-up still running at 11:11: %v", s.Status().Jobs[0].Running)

	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	locked = false
	testwait.Until(t, func() bool { return !s.Status().Jobs[0].Running }, "the catch-up of 10:00 to end once the lock is free")
	clk.Advance(idem.SchedulerRecheck) // a claim that gave up is tried again
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "once the lock is free", c.get(), "2026-03-01T09:00Z", "2026-03-01T10:00Z")
	wantLagging(t, "once 10:00 is done", s, 0)
}

// hangOn returns a job's fn that records its periods in c and hangs on
// period until release is closed or its context ends; started, unless nil,
// is sent the period as it starts.
func hangOn(c *calls, period string, started chan<- string, release <-chan struct{}) func(context.Context, idem.Period) error {
	return func(ctx context.Context, p idem.Period) error {
		if p.Name == period {
			if started != nil {
				started <- p.Name
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
			}
		}
		return c.fn(ctx, p)
	}
}

// TestSchedulerLagWhileFnHangs: a fn that hangs on <-ctx.Done() keeps its
// catch-up from returning; the job's lag grows and it turns unready past
// its tolerance; ready again once fn returns and the period is done.
func TestSchedulerLagWhileFnHangs(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(openLedger(t, t.TempDir()), idem.WithClock(clk))
	started, release := make(chan string, 1), make(chan struct{})
	var c calls
	fn := hangOn(&c, "2026-03-01T10:00Z", started, release)
	if err := s.Add("hourly", idem.Hourly(time.UTC), fn, idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhang) // before the Shutdown, should the test fail
	schedtest.Idle(t, s, clk.Now())
	wantLagging(t, "at 10:30, 09:00 done", s, 0)

	clk.Advance(30 * time.Minute) // 11:00: 10:00 starts, and hangs
	testwait.Recv(t, started, "fn of 10:00 to start")
	clk.Advance(5 * time.Minute)
	if st := s.Status(); !st.Ready || st.Jobs[0].Lag != 5*time.Minute || !st.Jobs[0].Running {
		t.Fatalf("at 11:05, fn hanging: ready %v, lag %v, running %v; want ready, 5m, running", st.Ready, st.Jobs[0].Lag, st.Jobs[0].Running)
	}
	clk.Advance(6 * time.Minute) // 11:11
	wantLagging(t, "at 11:11, fn hanging", s, 11*time.Minute)

	unhang()
	testwait.Until(t, func() bool { return !s.Status().Jobs[0].Running }, "the catch-up of 10:00 to end")
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "once fn returned", c.get(), "2026-03-01T09:00Z", "2026-03-01T10:00Z")
	wantLagging(t, "once 10:00 is done", s, 0)
}

// TestSchedulerLagReadsStore: a replica that was suspended (its wall clock
// jumped, its timers did not fire: it has not looked again) while another
// replica settled the job's due periods is ready at once: its readiness
// probe reads the cursor of a job lagging past its tolerance from the
// store, instead of answering 503 from its own stale knowledge. A period
// that nobody settled still counts as lag.
//
// The other replica settles its periods before this replica's clock jumps
// (by a clock of its own), and this replica's fn hangs on the period that
// nobody settles: a look of this replica's that was under way as its clock
// jumped sees the new time, as on a real machine (seen on a loaded one:
// it claimed 10:00 before the other replica could), and the answers are
// then the same as from the store: nothing left to run at 12:30, and 12:00
// running since 13:00 at 13:45, lagging as much.
func TestSchedulerLagReadsStore(t *testing.T) {
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	l := openLedger(t, t.TempDir())
	s := idem.NewScheduler(l, idem.WithClock(clk))
	release := make(chan struct{})
	var c calls
	fn := hangOn(&c, "2026-03-01T12:00Z", nil, release)
	if err := s.Add("hourly", idem.Hourly(time.UTC), fn, idem.WithLagTolerance(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	t.Cleanup(func() { close(release) }) // before the Shutdown (startScheduler's)
	schedtest.Idle(t, s, clk.Now())
	wantLagging(t, "at 10:30, 09:00 done", s, 0)

	var other calls
	otherClk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T12:30:00Z"))
	if _, err := idem.CatchUp(context.Background(), l, "hourly", idem.Hourly(time.UTC), other.fn, idem.WithClock(otherClk)); err != nil {
		t.Fatal(err)
	}
	wantPeriods(t, "the other replica", other.get(), "2026-03-01T10:00Z", "2026-03-01T11:00Z")
	clk.Jump(2 * time.Hour) // 12:30 here too; most often, this replica has not looked since 10:30
	if code := healthz(s); code != 200 {
		t.Fatalf("at 12:30, with 10:00 and 11:00 done by another replica: /healthz %d, want 200 (%+v)", code, s.Status())
	}
	wantLagging(t, "at 12:30, every due period done", s, 0)
	wantPeriods(t, "this replica", c.get(), "2026-03-01T09:00Z")

	clk.Jump(time.Hour + 15*time.Minute) // 13:45: 12:00, due at 13:00, done by no one
	if code := healthz(s); code != 503 {
		t.Fatalf("at 13:45, 12:00 not done: /healthz %d, want 503 (%+v)", code, s.Status())
	}
	wantLagging(t, "at 13:45, 12:00 not done", s, 45*time.Minute)
}
