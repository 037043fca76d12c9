package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestInvalidOptionValues: every option given a value it cannot take makes
// its call return an error matching ErrInvalidOption that names the option
// and the value, before anything is written or fn runs; nothing is
// clamped, and TwoPhase(nil) does not panic.
func TestInvalidOptionValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	items := idem.Items(func(yield func(string) bool) { yield("a") })
	cases := []struct {
		name string
		want string // the error's text names the option and its value
		call func(l *idem.Ledger, ran *bool) error
	}{
		{"WithLease", "WithLease(1ms)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.WithLease(time.Millisecond))
		}},
		{"WithBackoff(nil)", "WithBackoff: no backoff (nil)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.WithBackoff(nil))
		}},
		{"WithClock(nil)", "WithClock(nil)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.WithClock(nil))
		}},
		{"OnResult(nil)", "OnResult(nil)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.OnResult(nil))
		}},
		{"TwoPhase(nil)", "TwoPhase(nil)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.TwoPhase(nil))
		}},
		{"RetryWithin", "RetryWithin(-1s)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.RetryWithin(-time.Second))
		}},
		{"ReportTo(nil)", "ReportTo(nil)", func(l *idem.Ledger, ran *bool) error {
			return l.RunTx(ctx, key, func(context.Context, *sql.Tx) error { *ran = true; return nil }, idem.ReportTo(nil))
		}},
		{"Exponential(0)", "WithBackoff: Exponential(0s)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.WithBackoff(idem.Exponential(0)))
		}},
		{"Constant(-1s)", "WithBackoff: Constant(-1s)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil }, idem.WithBackoff(idem.Constant(-time.Second)))
		}},
		{"Capped(0)", "WithBackoff: Capped(0s)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil },
				idem.WithBackoff(idem.Capped(0, idem.Constant(time.Second))))
		}},
		{"MaxAttempts(0)", "WithBackoff: MaxAttempts(0)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil },
				idem.WithBackoff(idem.MaxAttempts(0, idem.Constant(time.Second))))
		}},
		{"nil inner backoff", "WithBackoff: FullJitter: no backoff (nil)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil },
				idem.WithBackoff(idem.Capped(time.Minute, idem.FullJitter(nil))))
		}},
		{"bad inner backoff", "WithBackoff: Exponential(-1s)", func(l *idem.Ledger, ran *bool) error {
			return l.Run(ctx, key, func(context.Context) error { *ran = true; return nil },
				idem.WithBackoff(idem.MaxAttempts(3, idem.EqualJitter(idem.Exponential(-time.Second)))))
		}},
		{"CatchUpAll", "CatchUpAll(-1)", func(l *idem.Ledger, ran *bool) error {
			_, err := idem.CatchUp(ctx, l, "j", daily, func(context.Context, idem.Period) error { *ran = true; return nil },
				idem.Since(day(1)), idem.CatchUpAll(-1))
			return err
		}},
		{"Since", "Since(0001-01-01 00:00:00 +0000 UTC)", func(l *idem.Ledger, ran *bool) error {
			_, err := idem.CatchUp(ctx, l, "j", daily, func(context.Context, idem.Period) error { *ran = true; return nil },
				idem.Since(time.Time{}))
			return err
		}},
		{"OnPeriod(nil)", "OnPeriod(nil)", func(l *idem.Ledger, ran *bool) error {
			_, err := idem.CatchUpTx(ctx, l, "j", daily, func(context.Context, *sql.Tx, idem.Period) error { *ran = true; return nil },
				idem.Since(day(1)), idem.OnPeriod(nil))
			return err
		}},
		{"WithWorkers", "WithWorkers(0)", func(l *idem.Ledger, ran *bool) error {
			_, err := idem.Each(ctx, l, key, items, func(context.Context, string) error { *ran = true; return nil }, idem.WithWorkers(0))
			return err
		}},
		{"WithBatch", "WithBatch(-2)", func(l *idem.Ledger, ran *bool) error {
			_, err := idem.EachTx(ctx, l, key, items, func(context.Context, *sql.Tx, string) error { *ran = true; return nil }, idem.WithBatch(-2))
			return err
		}},
		{"OnProgress(nil)", "OnProgress(nil)", func(l *idem.Ledger, ran *bool) error {
			_, err := idem.Each(ctx, l, key, items, func(context.Context, string) error { *ran = true; return nil }, idem.OnProgress(nil))
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewClock(day(10))))
			ran := false
			err := c.call(l, &ran)
			if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) || ran {
				t.Fatalf("got %v (fn ran: %v); want an error matching ErrInvalidOption naming %q", err, ran, c.want)
			}
			if recs, err := l.List(ctx, idem.Filter{}); err != nil || len(recs) != 0 {
				t.Fatalf("records written: %+v, %v", recs, err)
			}
			if js, err := l.Job(ctx, "j"); err != nil || js.Cursor != "" {
				t.Fatalf("job state written: %+v, %v", js, err)
			}
		})
	}
}

// TestInvalidStoreOption: a store constructor given an invalid default
// returns the error, naming the path, and creates no file.
func TestInvalidStoreOption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l, err := idem.OpenLedger(path, idem.WithLease(time.Microsecond))
	if err == nil {
		l.Close()
	}
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "WithLease(1µs)") {
		t.Fatalf("OpenLedger: %v; want ErrInvalidOption naming %s and WithLease(1µs)", err, path)
	}
	spath := filepath.Join(dir, "state.json")
	if _, err := idem.OpenStateFile(spath, idem.WithBackoff(idem.Exponential(0))); !errors.Is(err, idem.ErrInvalidOption) ||
		!strings.Contains(err.Error(), spath) || !strings.Contains(err.Error(), "Exponential(0s)") {
		t.Fatalf("OpenStateFile: %v; want ErrInvalidOption naming %s and Exponential(0s)", err, spath)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the directory holds %v (%v); want nothing", ents, err)
	}
}

// TestRetryRefusesInvalidBackoff: Retry with a backoff made from a bad
// value returns ErrInvalidOption without calling fn, instead of giving up
// after one attempt.
func TestRetryRefusesInvalidBackoff(t *testing.T) {
	t.Parallel()
	calls := 0
	err := idem.Retry(context.Background(), idem.MaxAttempts(0, idem.Constant(0)), func(context.Context) error {
		calls++
		return errors.New("down")
	})
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "MaxAttempts(0)") || calls != 0 {
		t.Fatalf("Retry: %v after %d calls; want ErrInvalidOption naming MaxAttempts(0), no call", err, calls)
	}
}

// TestCallerOptionSliceNotWritten: Each and CatchUp add options of their
// own to those they are given, but never in the caller's slice, even when
// it has room beyond its length.
func TestCallerOptionSliceNotWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(day(10))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	each := make([]idem.Option, 4)
	opts := each[:1]
	opts[0] = idem.WithWorkers(1)
	if _, err := idem.Each(ctx, l, points, idem.Items(func(yield func(string) bool) { yield("a") }),
		func(context.Context, string) error { return nil }, opts...); err != nil {
		t.Fatal(err)
	}
	for i, o := range each[1:] {
		if o != nil {
			t.Fatalf("Each wrote %T into the caller's slice at %d", o, i+1)
		}
	}
	cu := make([]idem.Option, 4)
	copts := cu[:1]
	copts[0] = idem.Since(day(8))
	if _, err := idem.CatchUp(ctx, l, "j", daily, func(context.Context, idem.Period) error { return nil }, copts...); err != nil {
		t.Fatal(err)
	}
	for i, o := range cu[1:] {
		if o != nil {
			t.Fatalf("CatchUp wrote %T into the caller's slice at %d", o, i+1)
		}
	}
}
