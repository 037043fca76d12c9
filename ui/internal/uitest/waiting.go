package uitest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/ui"
)

// WaitingLedger is a ledger where settle has done 2026-10-27 only, and
// mail (after settle's same day) and report (monthly, after every day of
// settle's month) caught up on 29 October with their dependencies: mail
// waits at 2026-10-28, having settled 10-27; the report of September waits
// for September's days.
func WaitingLedger(t *testing.T) (*idem.Ledger, ui.Options) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 10, 29, 2, 0, 0, 0, time.UTC)
	clk := idemtest.NewClock(now)
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"), idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	daily, monthly := idem.Daily(time.UTC), idem.Monthly(time.UTC)
	noop := func(context.Context, idem.Period) error { return nil }
	since := idem.Since(time.Date(2026, 10, 27, 0, 0, 0, 0, time.UTC))
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	same, within := idem.SamePeriod(), idem.Within(daily)
	res, err := idem.CatchUp(ctx, l, "mail", daily, noop, since, idem.After("settle", same))
	if err != nil || res.Count(idem.Ran) != 1 || res.Periods[len(res.Periods)-1].Outcome != idem.Waiting {
		t.Fatalf("mail: %+v, %v; want 10-27 run and 10-28 waiting", res, err)
	}
	if _, err := idem.CatchUp(ctx, l, "report", monthly, noop, idem.After("settle", within)); err != nil {
		t.Fatal(err)
	}
	return l, ui.Options{
		Now:       func() time.Time { return now },
		Schedules: map[string]idem.Schedule{"settle": daily, "mail": daily, "report": monthly},
		After: map[string][]ui.Dependency{
			"mail":   {{Job: "settle", Mapping: same}},
			"report": {{Job: "settle", Mapping: within}},
		},
	}
}
