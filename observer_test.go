package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
)

// TestObserverOnePerEach: the observer gets one Result per Each call, with
// the period's item counts, whatever the call returns; not a near-zero
// "ran" from the period's done mark, and not nothing when items are
// unknown.
func TestObserverOnePerEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewAutoClock(t0)))
	var got []idem.Result
	observe := idem.OnResult(func(r idem.Result) { got = append(got, r) })
	abc := idem.Items(func(yield func(string) bool) { _ = yield("a") && yield("b") && yield("c") })
	_, err := idem.Each(ctx, l, points, abc, func(_ context.Context, it string) error {
		if it == "c" {
			return idem.Permanent(errors.New("account frozen"))
		}
		return nil
	}, observe, idem.WithWorkers(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Outcome != idem.Ran || got[0].Key != points || got[0].Attempt != 1 || got[0].Err != nil ||
		got[0].Items.Done != 2 || got[0].Items.Parked != 1 || got[0].Items.Total() != 3 {
		t.Fatalf("observed %+v; want one Result: ran, attempt 1, 2 items done and 1 parked", got)
	}

	// An item whose outcome is unknown keeps the period open: still one
	// Result, with the error.
	got = nil
	k := idem.Key{Job: "daily_points", Period: "2026-10-28"}
	_, err = idem.Each(ctx, l, k, abc, func(_ context.Context, it string) error {
		if it == "b" {
			return errors.New("gateway timeout")
		}
		return nil
	}, observe, idem.AtMostOnce())
	if !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("Each: %v, want ErrUnknownOutcome", err)
	}
	if len(got) != 1 || got[0].Outcome != idem.Unknown || !errors.Is(got[0].Err, idem.ErrUnknownOutcome) ||
		got[0].Items.Unknown != 1 || got[0].Items.Done != 2 {
		t.Fatalf("observed %+v; want one Result: unknown, 2 items done and 1 unknown", got)
	}

	// A done period: one Result, already done.
	got = nil
	if _, err := idem.Each(ctx, l, points, abc, func(context.Context, string) error { return nil }, observe); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Outcome != idem.AlreadyDone || got[0].Items.Done != 2 {
		t.Fatalf("observed %+v; want one Result: already done, with the period's counts", got)
	}
}

// TestObserverOnePerCatchUpPeriod: CatchUp's observer gets one Result per
// period it handles, those CatchUpLatest skips included.
func TestObserverOnePerCatchUpPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewClock(day(4))))
	got := map[string]idem.Outcome{}
	res, err := idem.CatchUp(ctx, l, "report", daily, func(context.Context, idem.Period) error { return nil },
		idem.Since(day(1)), idem.CatchUpLatest(), idem.OnResult(func(r idem.Result) { got[r.Key.Period] = r.Outcome }))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Periods) != 3 || len(got) != 3 {
		t.Fatalf("periods %+v, observed %v; want 3 of each", res.Periods, got)
	}
	for _, p := range res.Periods {
		if got[p.Period.Name] != p.Outcome {
			t.Fatalf("period %s: observed %v, CatchUp says %v", p.Period.Name, got[p.Period.Name], p.Outcome)
		}
	}
}

type ctxMark struct{}

// ctxHandler records, for every log record, the ctxMark value of the
// context it was logged with.
type ctxHandler struct {
	mu   *sync.Mutex
	seen *[]string
}

func (h ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	mark, _ := ctx.Value(ctxMark{}).(string)
	*h.seen = append(*h.seen, mark+" "+r.Message)
	return nil
}
func (h ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h ctxHandler) WithGroup(string) slog.Handler      { return h }

// TestLogsUseCallerContext: Run, Each and CatchUp log with the caller's
// context (its values reach the handler: a trace id, say).
func TestLogsUseCallerContext(t *testing.T) {
	t.Parallel()
	var seen []string
	logger := slog.New(ctxHandler{mu: &sync.Mutex{}, seen: &seen})
	clk := idemtest.NewAutoClock(day(3))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk), idem.WithLogger(logger),
		idem.WithBackoff(idem.MaxAttempts(2, idem.Constant(time.Second))))
	ctx := context.WithValue(context.Background(), ctxMark{}, "caller")
	fails := func(context.Context) error { return errors.New("down") }
	if err := l.Run(ctx, key, fails, idem.RetryWithin(time.Hour)); !errors.Is(err, idem.ErrParked) {
		t.Fatalf("Run: %v", err)
	}
	if _, err := idem.Each(ctx, l, points, idem.Items(func(yield func(string) bool) { yield("a") }),
		func(context.Context, string) error { return idem.Permanent(errors.New("frozen")) }); err != nil {
		t.Fatalf("Each: %v", err)
	}
	if _, err := idem.CatchUp(ctx, l, "report", daily, func(context.Context, idem.Period) error { return nil },
		idem.Since(day(1))); err != nil {
		t.Fatalf("CatchUp: %v", err)
	}
	if len(seen) < 5 {
		t.Fatalf("logged %q; want the failures, the parking, the item and the periods", seen)
	}
	for _, s := range seen {
		if s[:7] != "caller " {
			t.Fatalf("logged without the caller's context: %q (all: %q)", s, seen)
		}
	}
}

// recorder is an observer that keeps the Results it gets.
type recorder struct {
	mu  sync.Mutex
	got []idem.Result
}

func (r *recorder) observe(res idem.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, res)
}

// of returns the Results of job.
func (r *recorder) of(job string) []idem.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rs []idem.Result
	for _, res := range r.got {
		if res.Key.Job == job {
			rs = append(rs, res)
		}
	}
	return rs
}

// TestSchedulerObserverReachesEach: the observers given to a Scheduler
// (and to a job) observe the Each and EachTx calls that the job's fn makes
// with its context, once each, without being passed to them again; a call
// given an observer of its own reports to that one only (no double
// count). The store's default observer sees each call once.
func TestSchedulerObserverReachesEach(t *testing.T) {
	t.Parallel()
	var sched, job, own, store recorder
	l := openLedger(t, t.TempDir(), idem.OnResult(store.observe))
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	s := idem.NewScheduler(l, idem.WithClock(clk), idem.OnResult(sched.observe))
	abc := idem.Items(func(yield func(string) bool) { _ = yield("a") && yield("b") && yield("c") })
	if err := s.Add("grant", idem.Hourly(time.UTC), func(ctx context.Context, p idem.Period) error {
		_, err := idem.Each(ctx, l, idem.Key{Job: "grant_items", Period: p.Name}, abc, func(context.Context, string) error { return nil })
		return err
	}, idem.OnResult(job.observe)); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("credit", idem.Hourly(time.UTC), func(ctx context.Context, p idem.Period) error {
		_, err := idem.EachTx(ctx, l, idem.Key{Job: "credit_items", Period: p.Name}, abc, func(context.Context, *sql.Tx, string) error { return nil })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("own", idem.Hourly(time.UTC), func(ctx context.Context, p idem.Period) error {
		_, err := idem.Each(ctx, l, idem.Key{Job: "own_items", Period: p.Name}, abc, func(context.Context, string) error { return nil },
			idem.OnResult(own.observe))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	schedtest.Start(t, s)
	schedtest.Idle(t, s, clk.Now())

	items := func(who string, r *recorder, job string, want int) {
		t.Helper()
		got := r.of(job)
		if len(got) != want {
			t.Fatalf("%s observed %d Results of %s, want %d: %+v", who, len(got), job, want, got)
		}
		for _, res := range got {
			if res.Outcome != idem.Ran || res.Items.Done != 3 {
				t.Errorf("%s observed %+v for %s; want ran, 3 items done", who, res, job)
			}
		}
	}
	items("the Scheduler's observer", &sched, "grant_items", 1)
	items("the job's observer", &job, "grant_items", 1)
	items("the Scheduler's observer", &sched, "credit_items", 1)
	items("the store's observer", &store, "grant_items", 1)
	items("the store's observer", &store, "credit_items", 1)
	items("the call's own observer", &own, "own_items", 1)
	items("the Scheduler's observer", &sched, "own_items", 0)
	items("the store's observer", &store, "own_items", 1)
	items("the other job's observer", &job, "credit_items", 0)
	for _, j := range []string{"grant", "credit", "own"} {
		if n := len(sched.of(j)); n != 1 {
			t.Errorf("the Scheduler's observer got %d Results of %s's period, want 1", n, j)
		}
		if n := len(store.of(j)); n != 1 {
			t.Errorf("the store's observer got %d Results of %s's period, want 1", n, j)
		}
	}
}
