package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/guard"

	"github.com/idemgo/idem"
)

// TestMisusedOptionIsAnError: an option given to a call it means nothing
// for is an error matching ErrInvalidOption that names the option and the
// call; the call runs nothing and writes nothing. The same options where
// they fit are no error.
func TestMisusedOptionIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	items := idem.Items(func(yield func(string) bool) { yield("a") })
	var r idem.Result
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	txFn := func(context.Context, *sql.Tx) error { ran = true; return nil }
	itemFn := func(context.Context, string) error { ran = true; return nil }
	periodFn := func(context.Context, idem.Period) error { ran = true; return nil }
	txPeriodFn := func(context.Context, *sql.Tx, idem.Period) error { ran = true; return nil }
	key := func(name string) idem.Key { return idem.Key{Job: "misuse", Period: name} }
	cases := []struct {
		name, option, call string
		do                 func(k idem.Key) error
	}{
		{"fan-out option to Run", "WithWorkers", "Run", func(k idem.Key) error {
			return l.Run(ctx, k, fn, idem.WithWorkers(2))
		}},
		{"ReportTo to Each", "ReportTo", "Each", func(k idem.Key) error {
			_, err := idem.Each(ctx, l, k, items, itemFn, idem.ReportTo(&r))
			return err
		}},
		{"mode to RunTx", "AtMostOnce", "RunTx", func(k idem.Key) error {
			return l.RunTx(ctx, k, txFn, idem.AtMostOnce())
		}},
		{"catch-up policy to Each", "CatchUpAll", "Each", func(k idem.Key) error {
			_, err := idem.Each(ctx, l, k, items, itemFn, idem.CatchUpAll(10))
			return err
		}},
		{"ReportTo to a job", "ReportTo", "Scheduler.Add", func(k idem.Key) error {
			return idem.NewScheduler(l).Add(k.Job, idem.Daily(time.UTC), periodFn, idem.ReportTo(&r))
		}},
		{"mode to a transactional job", "AtMostOnce", "AddTx", func(k idem.Key) error {
			return idem.AddTx(idem.NewScheduler(l), k.Job, idem.Daily(time.UTC), txPeriodFn, idem.AtMostOnce())
		}},
		{"job setting to Run", "WithJitter", "Run", func(k idem.Key) error {
			return l.Run(ctx, k, fn, idem.WithJitter(time.Second))
		}},
		{"fan-out option to idem.NewScheduler", "WithWorkers", "NewScheduler", func(k idem.Key) error {
			return idem.NewScheduler(l, idem.WithWorkers(2)).Add(k.Job, idem.Daily(time.UTC), periodFn)
		}},
		{"parameters to a store", "WithParams", "a store's defaults", func(k idem.Key) error {
			_, err := idem.OpenLedger(t.TempDir()+"/l.db", idem.WithParams(1))
			return err
		}},
		{"parameters to idem.NewScheduler", "WithParams", "NewScheduler", func(k idem.Key) error {
			return idem.NewScheduler(l, idem.WithParams(1)).Add(k.Job, idem.Daily(time.UTC), periodFn)
		}},
		{"scheduler option to idem.CatchUp", "WithMaxRunning", "CatchUp", func(k idem.Key) error {
			_, err := idem.CatchUp(ctx, l, k.Job, idem.Daily(time.UTC), periodFn, idem.WithMaxRunning(2))
			return err
		}},
		{"store option to Run", "WithLockWait", "Run", func(k idem.Key) error {
			return l.Run(ctx, k, fn, idem.WithLockWait(time.Second))
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ran = false
			k := key(string(rune('a' + i)))
			err := c.do(k)
			if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), c.option) || !strings.Contains(err.Error(), c.call) {
				t.Fatalf("got %v; want an error matching ErrInvalidOption naming %s and %s", err, c.option, c.call)
			}
			if ran {
				t.Errorf("fn ran")
			}
			if _, ok, err := l.Lookup(ctx, k); err != nil || ok {
				t.Errorf("Lookup %v: found %v, %v; want nothing written", k, ok, err)
			}
		})
	}
}

// TestOptionsWhereTheyFit: every option where it fits is no error, and one
// slice of common options is taken by every call.
func TestOptionsWhereTheyFit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	common := []idem.Option{idem.WithLease(time.Minute), idem.WithLogger(nil), idem.OnResult(func(idem.Result) {})}
	l, err := idem.OpenLedger(dir+"/l.db", append(common, idem.AtMostOnce(), idem.OneAttempt(), idem.WithLockWait(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	items := idem.Items(func(yield func(string) bool) { yield("a") })
	var r idem.Result
	k := func(p string) idem.Key { return idem.Key{Job: "fit", Period: p} }
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	check("Run", l.Run(ctx, k("1"), func(context.Context) error { return nil },
		append(common, idem.AtMostOnce(), idem.RetryWithin(time.Second), idem.ReportTo(&r), idem.WithParams("v3"))...))
	check("RunTx", l.RunTx(ctx, k("2"), func(context.Context, *sql.Tx) error { return nil },
		append(common, idem.ReportTo(&r), idem.OneAttempt(), idem.WithParamsBytes([]byte("v3")))...))
	_, err = idem.Each(ctx, l, k("3"), items, func(context.Context, string) error { return nil },
		append(common, idem.WithWorkers(2), idem.AtLeastOnce(), idem.WithBatch(10), idem.OnProgress(func(idem.Progress) {}), idem.WithParams(1))...)
	check("Each", err)
	_, err = idem.EachTx(ctx, l, k("4"), items, func(context.Context, *sql.Tx, string) error { return nil },
		append(common, idem.WithWorkers(2), idem.WithParams(1))...)
	check("EachTx", err)
	since := time.Now().Add(-time.Hour)
	_, err = idem.CatchUp(ctx, l, "cu", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil },
		append(common, idem.CatchUpAll(0), idem.AtMostOnce(), idem.WaitForTurn(), idem.Since(since), idem.OnPeriod(func(idem.PeriodResult) {}), idem.WithParams(1))...)
	check("CatchUp", err)
	_, err = idem.CatchUpTx(ctx, l, "cutx", idem.Daily(time.UTC), func(context.Context, *sql.Tx, idem.Period) error { return nil },
		append(common, idem.CatchUpLatest(), idem.OneAttempt(), idem.DueAtStart(), idem.ContinueAfterFailure(), idem.WithParams(1))...)
	check("CatchUpTx", err)
	s := idem.NewScheduler(l, append(common, idem.WithMaxRunning(2))...)
	check("Scheduler.Add", s.Add("j", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil },
		append(common, idem.WithJitter(time.Second), idem.AtMostOnce(), idem.CatchUpWindow(time.Hour), idem.DueAfter(time.Hour), idem.OneAttempt(), idem.WithParams(1))...))
	check("AddTx", idem.AddTx(s, "t", idem.Daily(time.UTC), func(context.Context, *sql.Tx, idem.Period) error { return nil },
		append(common, idem.RunOverlapping(), idem.WithLagTolerance(time.Hour), idem.CatchUpLatest(), idem.WithParamsBytes([]byte("v3")), idem.WithGuard(guard.MemoryGuard{}))...))
	_, err = idem.RunValueOn(ctx, l, k("5"), func(context.Context) (int, error) { return 1, nil }, idem.WithParams(1), idem.AtMostOnce())
	check("RunValue", err)
}
