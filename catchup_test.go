package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
)

type catchUpJob struct {
	s     idem.Store
	clk   *idemtest.Clock
	ran   []string
	fail  map[string]bool
	extra []idem.Option
}

func (j *catchUpJob) run(t *testing.T, opts ...idem.Option) (idem.CatchUpResult, error) {
	t.Helper()
	opts = append(append([]idem.Option{idem.WithClock(j.clk)}, j.extra...), opts...)
	return idem.CatchUp(context.Background(), j.s, "settle", daily, func(ctx context.Context, p idem.Period) error {
		if j.fail[p.Name] {
			return idem.Permanent(fmt.Errorf("no data for %s", p.Name))
		}
		j.ran = append(j.ran, p.Name)
		return nil
	}, opts...)
}

func names(first, n int) []string {
	var s []string
	for i := range n {
		s = append(s, day(first+i).Format(time.DateOnly))
	}
	return s
}

func TestCatchUpMissedPeriods(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T, dir string) idem.Store{
		"ledger":    func(t *testing.T, dir string) idem.Store { return openLedger(t, dir) },
		"statefile": func(t *testing.T, dir string) idem.Store { return openState(t, dir) },
	}
	for storeName, open := range stores {
		for _, missed := range []int{0, 1, 40, 250} { // 250: a capped catch-up defers twice, the last call partial
			for _, policy := range []string{"all", "all-capped", "latest"} {
				t.Run(fmt.Sprintf("%s/%s/missed=%d", storeName, policy, missed), func(t *testing.T) {
					t.Parallel()
					clk := idemtest.NewClock(day(1))
					j := &catchUpJob{s: open(t, t.TempDir()), clk: clk}
					// First run: no cursor, no Since: only the latest due period.
					if _, err := j.run(t); err != nil {
						t.Fatal(err)
					}
					if want := names(0, 1); !slices.Equal(j.ran, want) {
						t.Fatalf("first run ran %v, want %v", j.ran, want)
					}
					j.ran = nil
					// The host is down for `missed` days.
					clk.Set(day(1 + missed))
					var opt idem.Option
					switch policy {
					case "all":
						opt = idem.CatchUpAll(0)
					case "all-capped":
						opt = idem.CatchUpAll(idem.DefaultMaxPeriods)
					case "latest":
						opt = idem.CatchUpLatest()
					}
					res, err := j.run(t, opt)
					if err != nil {
						t.Fatal(err)
					}
					want := names(1, missed)
					switch {
					case policy == "latest" && missed > 0:
						want = want[missed-1:]
						if got := res.Count(idem.Skipped); got != missed-1 {
							t.Fatalf("skipped %d, want %d", got, missed-1)
						}
					case policy == "all-capped" && missed > idem.DefaultMaxPeriods:
						if res.Deferred != missed-idem.DefaultMaxPeriods {
							t.Fatalf("deferred %d, want %d", res.Deferred, missed-idem.DefaultMaxPeriods)
						}
						want = want[:idem.DefaultMaxPeriods]
					}
					if !slices.Equal(j.ran, want) {
						t.Fatalf("ran %d periods %v..., want %d", len(j.ran), head(j.ran), len(want))
					}
					// Calls until nothing is deferred; then the same command again does nothing.
					for res.Deferred > 0 {
						if res, err = j.run(t, opt); err != nil {
							t.Fatal(err)
						}
					}
					if policy == "all-capped" && !slices.Equal(j.ran, names(1, missed)) {
						t.Fatalf("capped catch-up ran %d periods in all, want %d in order", len(j.ran), missed)
					}
					before := len(j.ran)
					res, err = j.run(t, opt)
					if err != nil || len(j.ran) != before || len(res.Periods) != 0 {
						t.Fatalf("second call ran %d more (%v)", len(j.ran)-before, err)
					}
					js, _ := testledger.As[idemstore.CatchUpStore](t, j.s).Job(context.Background(), "settle")
					if want := day(missed).Format(time.DateOnly); js.Cursor != want {
						t.Fatalf("cursor %q, want %q", js.Cursor, want)
					}
				})
			}
		}
	}
}

func head(s []string) []string { return s[:min(3, len(s))] }

func TestCatchUpSinceAndDueAtStart(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(day(10))
	j := &catchUpJob{s: openLedger(t, t.TempDir()), clk: clk}
	if _, err := j.run(t, idem.Since(day(5))); err != nil {
		t.Fatal(err)
	}
	if want := names(5, 5); !slices.Equal(j.ran, want) {
		t.Fatalf("ran %v, want %v", j.ran, want)
	}
	j2 := &catchUpJob{s: openLedger(t, t.TempDir()), clk: clk}
	if _, err := j2.run(t, idem.DueAtStart()); err != nil {
		t.Fatal(err)
	}
	if want := names(10, 1); !slices.Equal(j2.ran, want) {
		t.Fatalf("due at start ran %v, want today %v", j2.ran, want)
	}
}

// TestCatchUpSinceInFuture: a Since after the next period to become due is
// refused, naming the job, the start and now, before anything is written (no
// cursor, no record: the periods before it do not count as settled); a Since
// in the next period starts the job there, and that period runs once due.
func TestCatchUpSinceInFuture(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T, dir string) idem.Store{
		"ledger":    func(t *testing.T, dir string) idem.Store { return openLedger(t, dir) },
		"statefile": func(t *testing.T, dir string) idem.Store { return openState(t, dir) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := idemtest.NewClock(day(10)) // 2026-10-11 02:00: 2026-10-10 is the latest due day
			j := &catchUpJob{s: open(t, t.TempDir()), clk: clk}
			_, err := j.run(t, idem.Since(day(11)))
			for _, want := range []string{`"settle"`, "2026-10-12T02:00:00Z", "now is 2026-10-11T02:00:00Z"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Since in the future: %v; want an error naming %s", err, want)
				}
			}
			if !errors.Is(err, idem.ErrInvalidOption) {
				t.Fatalf("%v; want ErrInvalidOption", err)
			}
			if len(j.ran) != 0 {
				t.Fatalf("ran %v; want nothing", j.ran)
			}
			cs := testledger.As[idemstore.CatchUpStore](t, j.s)
			if js, err := cs.Job(context.Background(), "settle"); err != nil || js.Cursor != "" {
				t.Fatalf("job state %+v, %v; want no cursor", js, err)
			}
			for i := 8; i <= 12; i++ {
				if rec, ok, err := cs.Lookup(context.Background(), idem.Key{Job: "settle", Period: day(i).Format(time.DateOnly)}); ok || err != nil {
					t.Fatalf("%s: %+v, %v; want no record", day(i).Format(time.DateOnly), rec, err)
				}
			}
			// The next period to become due: the job starts there.
			if _, err := j.run(t, idem.Since(day(10))); err != nil || len(j.ran) != 0 {
				t.Fatalf("Since the next period: ran %v, %v; want nothing yet", j.ran, err)
			}
			clk.Set(day(11))
			if _, err := j.run(t, idem.Since(day(10))); err != nil || !slices.Equal(j.ran, names(10, 1)) {
				t.Fatalf("a day later: ran %v, %v; want %v", j.ran, err, names(10, 1))
			}
		})
	}
}

func TestCatchUpStopsAtFailure(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewAutoClock(day(1))
	j := &catchUpJob{s: openLedger(t, t.TempDir()), clk: clk, fail: map[string]bool{}}
	j.run(t)
	j.ran = nil
	clk.Set(day(6)) // 5 due: 10-02 .. 10-06
	j.fail["2026-10-04"] = true
	res, err := j.run(t)
	if !errors.Is(err, idem.ErrParked) || !strings.Contains(err.Error(), "2026-10-04") {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(j.ran, names(1, 2)) || res.Cursor != "2026-10-03" || res.Deferred != 2 {
		t.Fatalf("ran %v, cursor %s, deferred %d", j.ran, res.Cursor, res.Deferred)
	}
	// Continue past it: later periods run, but the cursor stays before the failure.
	res, err = j.run(t, idem.ContinueAfterFailure())
	if want := []string{"2026-10-02", "2026-10-03", "2026-10-05", "2026-10-06"}; !errors.Is(err, idem.ErrParked) || !slices.Equal(j.ran, want) {
		t.Fatalf("continue: %v, ran %v, want %v", err, j.ran, want)
	}
	if res.Cursor != "2026-10-03" {
		t.Fatalf("cursor moved over a failed period: %s", res.Cursor)
	}
	js, _ := testledger.As[idemstore.CatchUpStore](t, j.s).Job(context.Background(), "settle")
	if js.Cursor != "2026-10-03" {
		t.Fatalf("stored cursor %s", js.Cursor)
	}
	// An operator resets the parked period; it runs, and the cursor catches up.
	delete(j.fail, "2026-10-04")
	if err := j.s.Resolve(context.Background(), idem.Key{Job: "settle", Period: "2026-10-04"}, idem.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	res, err = j.run(t)
	if err != nil || res.Cursor != "2026-10-06" {
		t.Fatalf("after reset: %v, cursor %s", err, res.Cursor)
	}
	counts := map[string]int{}
	for _, d := range j.ran {
		counts[d]++
	}
	for d, n := range counts {
		if n != 1 {
			t.Fatalf("%s ran %d times", d, n)
		}
	}
}

func TestCatchUpClockJumps(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(day(10))
	j := &catchUpJob{s: openLedger(t, t.TempDir()), clk: clk}
	if _, err := j.run(t, idem.Since(day(8))); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.ran, names(8, 2)) {
		t.Fatalf("ran %v", j.ran)
	}
	// The wall clock jumps back three days: nothing re-runs, the cursor stays.
	clk.Set(day(7))
	res, err := j.run(t)
	if err != nil || len(res.Periods) != 0 || len(j.ran) != 2 {
		t.Fatalf("after a jump back: %v, %d periods", err, len(res.Periods))
	}
	if js, _ := testledger.As[idemstore.CatchUpStore](t, j.s).Job(context.Background(), "settle"); js.Cursor != "2026-10-10" {
		t.Fatalf("cursor moved back to %s", js.Cursor)
	}
	// It jumps forward five days: the missed periods run, in order.
	clk.Set(day(15))
	if _, err := j.run(t); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.ran, append(names(8, 2), names(10, 5)...)) {
		t.Fatalf("ran %v", j.ran)
	}
}

func TestPruneNeverReopens(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(day(30))
	l := openLedger(t, t.TempDir())
	j := &catchUpJob{s: l, clk: clk}
	if _, err := j.run(t, idem.Since(day(0))); err != nil {
		t.Fatal(err)
	}
	if len(j.ran) != 30 {
		t.Fatalf("ran %d", len(j.ran))
	}
	ctx := context.Background()
	// Pruning beyond the cursor would forget periods catch-up can still reach.
	if _, err := l.Prune(ctx, "settle", "2026-10-31"); !errors.Is(err, idem.ErrPruneRefused) {
		t.Fatalf("prune beyond the cursor: %v", err)
	}
	n, err := l.Prune(ctx, "settle", "2026-10-20")
	if err != nil || n != 20 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	// A pruned period is done forever: Run, CatchUp from an early Since, Lookup.
	ran := false
	var res idem.Result
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-05"}, func(context.Context) error { ran = true; return nil }, idem.ReportTo(&res)); err != nil || ran || res.Outcome != idem.AlreadyDone {
		t.Fatalf("run of a pruned period: %v, ran %v, %v", err, ran, res.Outcome)
	}
	if rec := mustLookup(t, l, idem.Key{Job: "settle", Period: "2026-10-05"}); rec.Status != idem.StatusDone {
		t.Fatalf("lookup of a pruned period: %+v", rec)
	}
	j.ran = nil
	if _, err := l.DB().Exec(`UPDATE idem_jobs SET cursor = '' WHERE job = 'settle'`); err != nil {
		t.Fatal(err)
	}
	if _, err := j.run(t, idem.Since(day(0)), idem.CatchUpAll(0)); err != nil {
		t.Fatal(err)
	}
	if len(j.ran) != 0 {
		t.Fatalf("catch-up re-ran pruned periods %v", j.ran)
	}
	// An unsettled period blocks pruning over it.
	k := idem.Key{Job: "pay", Period: "2026-10-03"}
	_ = l.Run(ctx, k, func(context.Context) error { return errors.New("timeout") }, idem.AtMostOnce())
	if _, err := l.Prune(ctx, "pay", "2026-10-10"); !errors.Is(err, idem.ErrPruneRefused) || !strings.Contains(err.Error(), "2026-10-03") {
		t.Fatalf("prune over an unknown period: %v", err)
	}
}

// TestCatchUpKilledMidway SIGKILLs a child in the middle of a 10-day
// catch-up (after the 4th period's fn, before its done mark), then catches
// up again: every period ran, none twice but the one in flight (RunTx would
// make even that one once; here the log shows the at-least-once re-run).
func TestCatchUpKilledMidway(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"at-least-once", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			job := func(ctx context.Context, dir string, now time.Time) (idem.CatchUpResult, error) {
				l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
				if err != nil {
					return idem.CatchUpResult{}, err
				}
				defer l.Close()
				eff := newEffects(dir)
				opt := idem.AtLeastOnce()
				if mode == "two-phase" {
					opt = idem.TwoPhase(func(_ context.Context, k idem.Key) (bool, error) { return eff.Counts(t)[k.Period] > 0, nil })
				}
				return idem.CatchUp(ctx, l, "settle", daily, func(ctx context.Context, p idem.Period) error {
					eff.Add(nil, p.Name)
					return nil
				}, idem.WithClock(idemtest.NewClock(now)), idem.Since(day(0)), opt)
			}
			exit := idemtest.Fork(t, dir, func(dir string) {
				ctx := idemtest.KillWhen(context.Background(), func(p idemstore.Point, k idem.Key) bool {
					return p == idemstore.AfterFn && k.Period == "2026-10-04"
				})
				if _, err := job(ctx, dir, day(10)); err != nil {
					fmt.Println(err)
					os.Exit(3)
				}
			})
			if !exit.Killed {
				t.Fatalf("child not killed: %+v", exit)
			}
			got := newEffects(dir).Counts(t)
			if len(got) != 4 {
				t.Fatalf("before recovery: %d periods had effects, want 4", len(got))
			}
			// The recovery runs after the dead child's lease (the clock is a day later).
			res, err := job(context.Background(), dir, day(11))
			if err != nil {
				t.Fatal(err)
			}
			if res.Periods[0].Period.Name != "2026-10-04" {
				t.Fatalf("resumed at %s, want 2026-10-04", res.Periods[0].Period.Name)
			}
			got = newEffects(dir).Counts(t)
			if len(got) != 11 {
				t.Fatalf("%d periods had effects, want 11", len(got))
			}
			for p, n := range got {
				want := 1
				if p == "2026-10-04" && mode == "at-least-once" {
					want = 2 // killed between its effect and its done mark
				}
				if n != want {
					t.Errorf("%s: %d effects, want %d", p, n, want)
				}
			}
		})
	}
}

// TestCatchUpFirstPeriodFailsIsNotSkipped: a job whose very first period
// fails must not lose it, nor the periods after it, when a later call runs
// with a later clock. The job's start is recorded before its first period
// runs, so the later call starts there, not at its own latest due period.
func TestCatchUpFirstPeriodFailsIsNotSkipped(t *testing.T) {
	t.Parallel()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	sched := idem.Daily(shanghai)
	stores := map[string]func(t *testing.T, clk idem.Clock) idem.Store{
		"ledger": func(t *testing.T, clk idem.Clock) idem.Store {
			return openLedger(t, t.TempDir(), idem.WithClock(clk))
		},
		"statefile": func(t *testing.T, clk idem.Clock) idem.Store {
			return openState(t, t.TempDir(), idem.WithClock(clk))
		},
	}
	for name, open := range stores {
		for _, how := range []string{"backing-off", "parked-then-reset"} {
			t.Run(name+"/"+how, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				clk := idemtest.NewClock(time.Date(2026, 11, 30, 18, 5, 0, 0, time.UTC)) // 02:05 on 1 December in Shanghai
				s := open(t, clk)
				boom := errors.New("downstream refused")
				if how == "parked-then-reset" {
					boom = idem.Permanent(boom)
				}
				res, err := idem.CatchUp(ctx, s, "j", sched, func(context.Context, idem.Period) error { return boom },
					idem.WithClock(clk), idem.OneAttempt())
				if err == nil || len(res.Periods) != 1 || res.Periods[0].Period.Name != "2026-11-30" {
					t.Fatalf("first call: %v, periods %+v; want 2026-11-30 failed", err, res.Periods)
				}
				if rec := mustLookup(t, s, idem.Key{Job: "j", Period: "2026-11-30"}); rec.Status != idem.StatusFailed && rec.Status != idem.StatusParked {
					t.Fatalf("2026-11-30 is %s after its failure", rec.Status)
				}

				clk.Advance(48 * time.Hour)
				var ran []string
				ok := func(_ context.Context, p idem.Period) error { ran = append(ran, p.Name); return nil }
				res, err = idem.CatchUp(ctx, s, "j", sched, ok, idem.WithClock(clk), idem.OneAttempt())
				if how == "parked-then-reset" {
					// The parked period stops the catch-up; the later ones wait for it.
					if !errors.Is(err, idem.ErrParked) || len(ran) != 0 || res.Deferred != 2 {
						t.Fatalf("with 2026-11-30 parked: %v, ran %v, deferred %d; want ErrParked, nothing run, 2 deferred", err, ran, res.Deferred)
					}
					if err := s.Resolve(ctx, idem.Key{Job: "j", Period: "2026-11-30"}, idem.ResolveRetry); err != nil {
						t.Fatal(err)
					}
					res, err = idem.CatchUp(ctx, s, "j", sched, ok, idem.WithClock(clk), idem.OneAttempt())
				}
				want := []string{"2026-11-30", "2026-12-01", "2026-12-02"}
				if err != nil || !slices.Equal(ran, want) || res.Cursor != "2026-12-02" {
					t.Fatalf("later call: %v, ran %v, cursor %q; want ran %v, cursor 2026-12-02", err, ran, res.Cursor, want)
				}
				if js, err := testledger.As[idemstore.CatchUpStore](t, s).Job(ctx, "j"); err != nil || js.Cursor != "2026-12-02" {
					t.Fatalf("stored cursor %q (%v)", js.Cursor, err)
				}
				for _, p := range want {
					if rec := mustLookup(t, s, idem.Key{Job: "j", Period: p}); rec.Status != idem.StatusDone {
						t.Fatalf("%s is %s", p, rec.Status)
					}
				}
			})
		}
	}
}

// busySignal is a ledger that tells when a claim finds its key held by
// another attempt.
type busySignal struct {
	testledger.Store
	busy chan struct{}
}

func (b busySignal) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	c, err := b.Store.Claim(ctx, req)
	if err == nil && c.State == idemstore.ClaimBusy {
		select {
		case b.busy <- struct{}{}:
		default:
		}
	}
	return c, err
}

// TestCatchUpWaitForTurn: with WaitForTurn, a catch-up that reaches a
// period another holder is running waits for it instead of stopping with
// ErrInProgress, and goes on once it is done; without it, it stops there.
func TestCatchUpWaitForTurn(t *testing.T) {
	t.Parallel()
	sched := idem.Daily(time.UTC)
	now := time.Now()
	held := idem.Key{Job: "j", Period: idem.LastPeriod(sched, now).Name} // the last of three due days
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			t.Parallel()
			s := busySignal{testledger.SPI(t, openLedger(t, t.TempDir())), make(chan struct{}, 1)}
			ctx := context.Background()
			started, release, holderDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				holderDone <- idem.RunOn(ctx, s, held, func(context.Context) error { close(started); <-release; return nil })
			}()
			testwait.Recv(t, started, "the holder's fn to start")
			var ran []string
			opts := []idem.Option{idem.Since(now.AddDate(0, 0, -3))}
			if wait {
				opts = append(opts, idem.WaitForTurn())
			}
			type result struct {
				res idem.CatchUpResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := idem.CatchUp(ctx, s, "j", sched, func(_ context.Context, p idem.Period) error {
					ran = append(ran, p.Name)
					return nil
				}, opts...)
				done <- result{res, err}
			}()
			testwait.Recv(t, s.busy, "the catch-up to find %s held", held)
			if !wait {
				r := testwait.Recv(t, done, "the catch-up to return")
				if !errors.Is(r.err, idem.ErrInProgress) || slices.Contains(ran, held.Period) {
					t.Fatalf("without WaitForTurn: %v, ran %v; want ErrInProgress at %s", r.err, ran, held.Period)
				}
				close(release)
				testwait.Recv(t, holderDone, "the holder's Run to return")
				return
			}
			close(release)
			if err := testwait.Recv(t, holderDone, "the holder's Run to return"); err != nil {
				t.Fatal(err)
			}
			r := testwait.Recv(t, done, "the catch-up to return once the holder is done")
			// Three due days, unless the day changed (UTC midnight) since
			// now was read: then a fourth, after the held one. Either way
			// every due day but the held one ran here.
			periods := make([]string, len(r.res.Periods))
			for i, p := range r.res.Periods {
				periods[i] = p.Period.Name
			}
			if r.err != nil || len(periods) < 3 || len(ran) != len(periods)-1 || slices.Contains(ran, held.Period) || !slices.Contains(periods, held.Period) {
				t.Fatalf("with WaitForTurn: %v, ran %v, periods %+v; want every due day but %s run and %s done by its holder", r.err, ran, r.res.Periods, held.Period, held.Period)
			}
		})
	}
}

// TestCatchUpInvalidJob: CatchUp names the job it was given and what is
// wrong with it, with no period (there is none).
func TestCatchUpInvalidJob(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	_, err := idem.CatchUp(context.Background(), l, "", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
	if want := `idem: invalid job "": job is empty`; err == nil || err.Error() != want || !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("%v, want %s", err, want)
	}
	_, err = idem.CatchUp(context.Background(), l, "a\tb", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
	if err == nil || strings.Contains(err.Error(), `"-"`) || !strings.Contains(err.Error(), `"a\tb"`) {
		t.Fatalf("%v, want the job and no placeholder period", err)
	}
}
