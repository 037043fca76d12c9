package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem/guard"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
)

// TestSchedulerGuardDefers: a guard that refuses defers a due job: fn does
// not run, nothing is claimed (no attempt used), Status names the guard and
// stays ready, and the Scheduler asks again at the next recheck, not in a
// tight loop; once the guard lets it, the period runs once.
func TestSchedulerGuardDefers(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	var blocked atomic.Bool
	var asked atomic.Int64
	blocked.Store(true)
	guard := guard.Func("partner", func(context.Context) error {
		asked.Add(1)
		if blocked.Load() {
			return errors.New("partner API answers 503")
		}
		return nil
	})
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn, idem.WithGuard(guard)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "while the guard refuses", c.get())
	key := idem.Key{Job: "hourly", Period: "2026-03-01T09:00Z"}
	if _, ok, err := l.Lookup(context.Background(), key); err != nil || ok {
		t.Fatalf("Lookup(%s) after a deferral: found %v, %v; want no record (nothing claimed)", key, ok, err)
	}
	st := s.Status()
	j := st.Jobs[0]
	if !strings.Contains(j.Deferred, "guard partner: partner API answers 503") || j.LastError != "" || !j.Ready || !st.Ready {
		t.Fatalf("status while deferred: %+v", st)
	}
	if want := clk.Now().Add(idem.SchedulerRecheck); !j.NextRun.Equal(want) {
		t.Errorf("NextRun while deferred: %v, want the next recheck %v", j.NextRun, want)
	}
	n := asked.Load()
	if n == 0 {
		t.Fatal("the guard was never asked")
	}
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	if got := asked.Load(); got != n+1 {
		t.Errorf("after a recheck the guard was asked %d more times, want 1", got-n)
	}
	wantPeriods(t, "still refused", c.get())

	blocked.Store(false)
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after the guard let it", c.get(), "2026-03-01T09:00Z")
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Errorf("%s: %s attempt %d, want done at attempt 1 (the deferrals used none)", key, rec.Status, rec.Attempt)
	}
	if j := s.Status().Jobs[0]; j.Deferred != "" || j.LastOutcome != idem.Ran {
		t.Errorf("status after the run: %+v", j)
	}
}

// TestSchedulerParams: a job's WithParams is checked for every scheduled
// period. A period left failed by a run with other parameters is not
// retried: the job stops there (the later period waits), nothing is
// written, and the Scheduler is unready until a person settles it; a
// period done with the job's own parameters is replayed as done.
func TestSchedulerParams(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	ctx := context.Background()
	// An earlier deployment, with rate table v1, failed 09:00 and died.
	_, err := idem.CatchUp(ctx, l, "settle", idem.Hourly(time.UTC),
		func(context.Context, idem.Period) error { return errors.New("downstream timeout") },
		idem.WithParams("rates-v1"), idem.WithClock(clk), idem.CatchUpLatest(), idem.OneAttempt())
	if err == nil {
		t.Fatal("the v1 catch-up did not fail")
	}
	key := idem.Key{Job: "settle", Period: "2026-03-01T09:00Z"}
	before := mustLookup(t, l, key)
	if before.Status != idem.StatusFailed || before.Fingerprint == "" {
		t.Fatalf("%s after v1: %+v, want failed with a fingerprint", key, before)
	}

	// The new deployment runs with v2, after the backoff.
	clk.Advance(time.Hour / 2) // 11:00: 10:00 is due too
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("settle", idem.Hourly(time.UTC), c.fn, idem.WithParams("rates-v2"), idem.CatchUpAll(0)); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "v2 against a period claimed with v1", c.get())
	after := mustLookup(t, l, key)
	if after.Status != before.Status || after.Attempt != before.Attempt || after.Fingerprint != before.Fingerprint {
		t.Errorf("%s was written: before %+v, after %+v", key, before, after)
	}
	if _, ok, err := l.Lookup(ctx, idem.Key{Job: "settle", Period: "2026-03-01T10:00Z"}); err != nil || ok {
		t.Errorf("10:00 after the mismatch: found %v, %v; want it waiting", ok, err)
	}
	st := s.Status()
	j := st.Jobs[0]
	if st.Ready || j.Ready || j.ParamsMismatch != 1 || j.LastOutcome != idem.ParamsMismatch ||
		!strings.Contains(j.Why, "other parameters") || !strings.Contains(j.LastError, "params") {
		t.Fatalf("status after the mismatch: %+v", st)
	}

	// A Reset keeps the period's parameters: still refused.
	if err := l.Reset(ctx, key); err != nil {
		t.Fatal(err)
	}
	clk.Advance(idem.SchedulerRecheck)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after a reset", c.get())
	if j := s.Status().Jobs[0]; j.Ready || j.ParamsMismatch != 1 {
		t.Errorf("status after a reset: %+v", j)
	}

	// A person runs 09:00 by hand with its own parameters; the next look
	// passes over it and runs 10:00 and 11:00 with v2.
	var byHand calls
	if err := l.Run(ctx, key, func(ctx context.Context) error { return byHand.fn(ctx, idem.Period{Name: key.Period}) },
		idem.WithParams("rates-v1")); err != nil {
		t.Fatal(err)
	}
	wantPeriods(t, "by hand", byHand.get(), "2026-03-01T09:00Z")
	clk.Advance(time.Hour) // 12:00: the next due time
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after the period was settled", c.get(), "2026-03-01T10:00Z", "2026-03-01T11:00Z")
	if j := s.Status().Jobs[0]; !j.Ready || j.ParamsMismatch != 0 {
		t.Errorf("status after the period was settled: %+v", j)
	}
	for p, want := range map[string]string{"2026-03-01T09:00Z": before.Fingerprint, "2026-03-01T10:00Z": "", "2026-03-01T11:00Z": ""} {
		rec := mustLookup(t, l, idem.Key{Job: "settle", Period: p})
		if rec.Status != idem.StatusDone || (want != "" && rec.Fingerprint != want) || (want == "" && rec.Fingerprint == before.Fingerprint) {
			t.Errorf("%s: %s with fingerprint %q", p, rec.Status, rec.Fingerprint)
		}
	}
}

// TestSchedulerParamsDeploy: a deploy with new parameters, when the
// periods before are done, is neither refused nor unready: nothing due
// checks nothing, and the next period runs with the new parameters.
func TestSchedulerParamsDeploy(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	ctx := context.Background()
	if _, err := idem.CatchUp(ctx, l, "settle", idem.Hourly(time.UTC), func(context.Context, idem.Period) error { return nil },
		idem.WithParams("rates-v1"), idem.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("settle", idem.Hourly(time.UTC), c.fn, idem.WithParams("rates-v2")); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	if st := s.Status(); !st.Ready || st.Jobs[0].ParamsMismatch != 0 || st.Jobs[0].LastError != "" {
		t.Fatalf("status after a deploy with new parameters: %+v", st)
	}
	clk.Advance(30 * time.Minute)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "after the deploy", c.get(), "2026-03-01T10:00Z")
	// The same parameters as a duplicate trigger of the done 10:00: done.
	err := idem.RunOn(ctx, l, idem.Key{Job: "settle", Period: "2026-03-01T10:00Z"}, func(context.Context) error {
		t.Error("ran a done period")
		return nil
	}, idem.WithParams("rates-v2"))
	if err != nil {
		t.Errorf("a duplicate with the job's parameters: %v", err)
	}
	// Other ones: refused.
	err = idem.RunOn(ctx, l, idem.Key{Job: "settle", Period: "2026-03-01T10:00Z"}, func(context.Context) error { return nil }, idem.WithParams("rates-v1"))
	if !errors.Is(err, idem.ErrParamsMismatch) {
		t.Errorf("a duplicate with other parameters: %v, want ErrParamsMismatch", err)
	}
}
