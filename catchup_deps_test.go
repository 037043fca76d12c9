package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// depJob is a job of a dependency test: its fn records, under mu, the
// order in which periods of every job ran.
type depRuns struct {
	mu  sync.Mutex
	log []string // "job/period", in the order fn ran
}

func (d *depRuns) fn(job string) func(context.Context, idem.Period) error {
	return func(_ context.Context, p idem.Period) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.log = append(d.log, job+"/"+p.Name)
		return nil
	}
}

func (d *depRuns) ran(job string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, e := range d.log {
		if j, p, _ := strings.Cut(e, "/"); j == job {
			out = append(out, p)
		}
	}
	return out
}

// TestAfterWaitsWithoutAttempts: a period whose upstream period is not
// done waits: no claim, no record, no attempt, no error, however often it
// is triggered; what it waits for is in the result (with "not run yet" for
// a job the store has never seen). Once the upstream period is done, the
// next call runs it.
func TestAfterWaitsWithoutAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	runs := &depRuns{}
	mail := func() (idem.CatchUpResult, error) {
		var seen []idem.Result
		res, err := idem.CatchUp(ctx, l, "mail", daily, runs.fn("mail"), idem.After("settle", idem.SamePeriod()),
			idem.OnResult(func(r idem.Result) { seen = append(seen, r) }))
		if len(seen) != len(res.Periods) {
			t.Fatalf("observer got %d results for %d periods", len(seen), len(res.Periods))
		}
		return res, err
	}
	for i := range 20 {
		res, err := mail()
		if err != nil || len(res.Periods) != 1 || res.Periods[0].Outcome != idem.Waiting {
			t.Fatalf("trigger %d: %+v, %v; want the period waiting, no error", i, res, err)
		}
		w := res.Periods[0].Waiting
		if len(w) != 1 || w[0].Key != (idem.Key{Job: "settle", Period: "2026-10-27"}) || w[0].Status != "" ||
			w.String() != "settle/2026-10-27 (not run yet)" {
			t.Fatalf("waits %v (%q)", w, w.String())
		}
	}
	if _, ok, err := l.Lookup(ctx, idem.Key{Job: "mail", Period: "2026-10-27"}); err != nil || ok {
		t.Fatalf("a waiting period has a record (%v, %v): it must not be claimed", ok, err)
	}
	if got := runs.ran("mail"); len(got) != 0 {
		t.Fatalf("mail ran %v while waiting", got)
	}
	if _, err := idem.CatchUp(ctx, l, "settle", daily, runs.fn("settle")); err != nil {
		t.Fatal(err)
	}
	res, err := mail()
	if err != nil || res.Count(idem.Ran) != 1 {
		t.Fatalf("after settle: %+v, %v", res, err)
	}
	rec := mustLookup(t, l, idem.Key{Job: "mail", Period: "2026-10-27"})
	if rec.Status != idem.StatusDone || rec.Attempt != 1 || rec.Failures != 0 {
		t.Fatalf("mail's record %+v: want done at attempt 1, no failure (waiting counted none)", rec)
	}
}

// TestAfterParkedUpstreamSaysSo: an upstream period that is parked makes
// the period say so, and wait; a Reset and a done upstream let it run.
func TestAfterParkedUpstreamSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	runs := &depRuns{}
	_, err := idem.CatchUp(ctx, l, "settle", daily, func(context.Context, idem.Period) error {
		return idem.Permanent(errors.New("bank file missing"))
	})
	if !errors.Is(err, idem.ErrParked) {
		t.Fatalf("settle: %v, want parked", err)
	}
	res, err := idem.CatchUp(ctx, l, "mail", daily, runs.fn("mail"), idem.After("settle", idem.SamePeriod()))
	if err != nil || res.Periods[0].Outcome != idem.Waiting || res.Periods[0].Waiting.String() != "settle/2026-10-27 (parked)" {
		t.Fatalf("mail: %+v, %v; want waiting for settle/2026-10-27 (parked)", res, err)
	}
	if err := l.Reset(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.CatchUp(ctx, l, "settle", daily, runs.fn("settle")); err != nil {
		t.Fatal(err)
	}
	if res, err := idem.CatchUp(ctx, l, "mail", daily, runs.fn("mail"), idem.After("settle", idem.SamePeriod())); err != nil || res.Count(idem.Ran) != 1 {
		t.Fatalf("mail after the reset: %+v, %v", res, err)
	}
}

// TestAfterCatchUpOrder: after downtime, a chain settle -> mail -> report
// (monthly, after every day of the month) catches up in an order that
// respects every dependency, whichever job is triggered first: a period
// runs only after every period it waits for has run.
func TestAfterCatchUpOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Down from 2026-09-27 to 2026-10-03 02:00: September's last days and
	// the month's report are due.
	clk := idemtest.NewClock(time.Date(2026, 10, 3, 2, 0, 0, 0, time.UTC))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	runs := &depRuns{}
	since := idem.Since(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC))
	monthly := idem.Monthly(time.UTC)
	jobs := map[string]func() (idem.CatchUpResult, error){
		"settle": func() (idem.CatchUpResult, error) {
			return idem.CatchUp(ctx, l, "settle", daily, runs.fn("settle"), since)
		},
		"mail": func() (idem.CatchUpResult, error) {
			return idem.CatchUp(ctx, l, "mail", daily, runs.fn("mail"), since, idem.After("settle", idem.SamePeriod()))
		},
		"report": func() (idem.CatchUpResult, error) {
			return idem.CatchUp(ctx, l, "report", monthly, runs.fn("report"), since, idem.After("settle", idem.Within(daily)))
		},
	}
	// Triggers in the worst order first, then each job again until
	// nothing waits.
	for _, order := range [][]string{{"report", "mail", "settle"}, {"mail", "report", "settle"}, {"report", "mail"}} {
		for _, job := range order {
			if _, err := jobs[job](); err != nil {
				t.Fatalf("%s: %v", job, err)
			}
		}
	}
	if got := runs.ran("settle"); len(got) != 32 { // 2026-09-01 .. 2026-10-02
		t.Fatalf("settle ran %d periods", len(got))
	}
	if got := runs.ran("mail"); len(got) != 32 {
		t.Fatalf("mail ran %d periods: %v", len(got), got)
	}
	if got := runs.ran("report"); !slices.Equal(got, []string{"2026-09"}) {
		t.Fatalf("report ran %v, want 2026-09", got)
	}
	// The order: each mail period after its settle period; the report
	// after all of September's settle periods.
	pos := map[string]int{}
	for i, e := range runs.log {
		pos[e] = i
	}
	for day := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC); day.Month() == time.September; day = day.AddDate(0, 0, 1) {
		d := day.Format("2006-01-02")
		if pos["mail/"+d] < pos["settle/"+d] {
			t.Fatalf("mail/%s ran before settle/%s", d, d)
		}
		if pos["report/2026-09"] < pos["settle/"+d] {
			t.Fatalf("the report ran before settle/%s", d)
		}
	}
}

// TestWithinDaylightSaving: Within maps a day to its hours in the
// schedule's zone, 23 and 25 of them on the days a daylight-saving change
// shortens or lengthens; a month to its days.
func TestWithinDaylightSaving(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		day   string
		hours int
	}{{"2026-03-28", 24}, {"2026-03-29", 23}, {"2026-10-25", 25}, {"2026-10-26", 24}} {
		day, err := idem.Daily(berlin).Parse(c.day)
		if err != nil {
			t.Fatal(err)
		}
		// The day's job after the hourly one: what it waits for in an
		// empty ledger is every hour of the day.
		clk := idemtest.NewClock(day.End.Add(time.Minute))
		l := openLedger(t, t.TempDir(), idem.WithClock(clk))
		res, err := idem.CatchUp(ctx, l, "daily", idem.Daily(berlin), func(context.Context, idem.Period) error { return nil },
			idem.After("hourly", idem.Within(idem.Hourly(berlin))))
		if err != nil || len(res.Periods) != 1 || res.Periods[0].Period != day {
			t.Fatalf("%s: %+v, %v", c.day, res, err)
		}
		w := res.Periods[0].Waiting
		if len(w) != c.hours {
			t.Fatalf("%s waits for %d hours, want %d: %v", c.day, len(w), c.hours, w)
		}
		hours := idem.Hourly(berlin)
		if first, last := w[0].Key.Period, w[len(w)-1].Key.Period; first != hours.At(day.Start).Name || last != hours.At(day.End.Add(-time.Second)).Name {
			t.Fatalf("%s waits for %s .. %s", c.day, first, last)
		}
	}
	for month, days := range map[string]int{"2026-02": 28, "2028-02": 29, "2026-04": 30, "2026-10": 31} {
		m, err := idem.Monthly(berlin).Parse(month)
		if err != nil {
			t.Fatal(err)
		}
		clk := idemtest.NewClock(m.End.Add(time.Minute))
		l := openLedger(t, t.TempDir(), idem.WithClock(clk))
		res, err := idem.CatchUp(ctx, l, "report", idem.Monthly(berlin), func(context.Context, idem.Period) error { return nil },
			idem.After("settle", idem.Within(idem.Daily(berlin))))
		if err != nil || len(res.Periods[0].Waiting) != days {
			t.Fatalf("%s waits for %d days (%v), want %d", month, len(res.Periods[0].Waiting), err, days)
		}
	}
}

// TestAfterPrevious: with AfterPrevious a period waits while the one before
// it is unsettled — parked here, after ContinueAfterFailure went past it —
// and the job's first period does not wait for the one before the job
// began.
func TestAfterPrevious(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	runs := &depRuns{}
	res, err := idem.CatchUp(ctx, l, "balance", daily, runs.fn("balance"), idem.AfterPrevious())
	if err != nil || res.Count(idem.Ran) != 1 {
		t.Fatalf("first period: %+v, %v; want it run (nothing before the job)", res, err)
	}
	// 10-28 fails for good; 10-29 must not run while 10-28 is parked.
	clk.Advance(48 * time.Hour)
	fail := func(_ context.Context, p idem.Period) error {
		if p.Name == "2026-10-28" {
			return idem.Permanent(errors.New("ledger mismatch"))
		}
		return runs.fn("balance")(ctx, p)
	}
	res, err = idem.CatchUp(ctx, l, "balance", daily, fail, idem.AfterPrevious(), idem.ContinueAfterFailure())
	if !errors.Is(err, idem.ErrParked) || len(res.Periods) != 2 || res.Periods[1].Outcome != idem.Waiting ||
		res.Periods[1].Waiting.String() != "balance/2026-10-28 (parked)" {
		t.Fatalf("%+v, %v; want 10-28 parked and 10-29 waiting for it", res, err)
	}
	if got := runs.ran("balance"); !slices.Equal(got, []string{"2026-10-27"}) {
		t.Fatalf("ran %v", got)
	}
}

// TestAfterUpstreamBeforeItsSince: an upstream period before the
// upstream's Since (at or before its cursor, never run, and never to be
// run: catch-up does not go back before a cursor) counts as settled, as
// AfterPrevious counts the job's own periods before its cursor: the
// downstream's periods from its own, earlier Since run instead of waiting
// forever; those from the upstream's Since on wait for it as before. So
// does Within, and idem.Waiting (what idem show lists) agrees.
func TestAfterUpstreamBeforeItsSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	runs := &depRuns{}
	// settle began on 10-25 and has settled 10-25 and 10-26; 10-27 is
	// not run yet.
	clk.Set(time.Date(2026, 10, 27, 2, 0, 0, 0, time.UTC))
	if _, err := idem.CatchUp(ctx, l, "settle", daily, runs.fn("settle"), idem.Since(time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC))); err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	after := idem.After("settle", idem.SamePeriod())
	res, err := idem.CatchUp(ctx, l, "mail", daily, runs.fn("mail"), after, idem.Since(time.Date(2026, 10, 22, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-10-22", "2026-10-23", "2026-10-24", "2026-10-25", "2026-10-26"}
	if got := runs.ran("mail"); !slices.Equal(got, want) {
		t.Fatalf("mail ran %v, want %v (the days before settle's Since are settled for it)", got, want)
	}
	if last := res.Periods[len(res.Periods)-1]; last.Outcome != idem.Waiting || last.Waiting.String() != "settle/2026-10-27 (not run yet)" {
		t.Fatalf("mail's last period %+v: want 10-27 waiting for settle/2026-10-27 (not run yet)", last)
	}
	// Within: a weekly job over the week of 10-19..10-25 waits for 10-25
	// only, which settle did.
	weekly := idem.Weekly(time.UTC)
	wk := weekly.At(time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC))
	within := idem.After("settle", idem.Within(daily))
	w, err := idem.WaitingFor(ctx, l, "summary", weekly, wk, within)
	if err != nil || len(w) != 0 {
		t.Fatalf("Waiting for the week %s: %v, %v; want nothing (the days before settle's Since are settled)", wk.Name, w, err)
	}
	// A job that never ran (no cursor) is still waited for, saying so.
	w, err = idem.WaitingFor(ctx, l, "mail", daily, daily.At(time.Date(2026, 10, 22, 0, 0, 0, 0, time.UTC)), idem.After("import", idem.SamePeriod()))
	if err != nil || w.String() != "import/2026-10-22 (not run yet)" {
		t.Fatalf("Waiting for a job never run: %v, %v", w, err)
	}
}

// TestAfterMisuse: an empty or invalid upstream, a zero Mapping, and a job
// waiting for its own periods are errors matching ErrInvalidOption, before
// anything runs.
func TestAfterMisuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	fn := func(context.Context, idem.Period) error { t.Error("fn ran"); return nil }
	for _, c := range []struct {
		name string
		opt  idem.Option
		want string
	}{
		{"empty upstream", idem.After("", idem.SamePeriod()), "job is empty"},
		{"zero mapping", idem.After("settle", idem.Mapping{}), "no mapping"},
		{"nil Within", idem.After("settle", idem.Within(nil)), "no mapping"},
		{"nil MapFunc", idem.After("settle", idem.MapFunc("x", nil)), "no mapping"},
		{"itself", idem.After("mail", idem.SamePeriod()), "its own periods"},
	} {
		_, err := idem.CatchUp(ctx, l, "mail", daily, fn, c.opt)
		if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrInvalidOption saying %q", c.name, err, c.want)
		}
	}
	if recs, err := l.List(ctx, idem.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("records %v, %v; want none", recs, err)
	}
}

// ExampleAfter: settle the day, then mail the merchants, then the month's
// report from every settled day.
func ExampleAfter() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"), idem.WithClock(idemtest.NewClock(time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC))))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	say := func(job string) func(context.Context, idem.Period) error {
		return func(_ context.Context, p idem.Period) error { fmt.Println(job, p.Name); return nil }
	}
	daily, monthly := idem.Daily(time.UTC), idem.Monthly(time.UTC)
	oct := idem.Since(time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC))
	after := idem.After("settle", idem.SamePeriod())
	res, _ := idem.CatchUp(ctx, l, "report", monthly, say("report"), idem.After("settle", idem.Within(daily)))
	fmt.Println("report", res.Periods[0].Period.Name, res.Periods[0].Outcome, "for", len(res.Periods[0].Waiting), "days")
	res, _ = idem.CatchUp(ctx, l, "mail", daily, say("mail"), oct, after)
	fmt.Println("mail", res.Periods[0].Period.Name, res.Periods[0].Outcome, "for", res.Periods[0].Waiting)
	settled := 0
	_, _ = idem.CatchUp(ctx, l, "settle", daily, func(context.Context, idem.Period) error { settled++; return nil },
		idem.Since(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)))
	fmt.Println("settled", settled, "days")
	_, _ = idem.CatchUp(ctx, l, "mail", daily, say("mail"), oct, after)
	_, _ = idem.CatchUp(ctx, l, "report", monthly, say("report"), idem.After("settle", idem.Within(daily)))
	// Output:
	// report 2026-10 waiting for 31 days
	// mail 2026-10-30 waiting for settle/2026-10-30 (not run yet)
	// settled 31 days
	// mail 2026-10-30
	// mail 2026-10-31
	// report 2026-10
}

// TestAfterRunTx: idem.CatchUpTx waits as idem.CatchUp does: a waiting
// period's transaction is not begun, and runs once its upstream is done.
func TestAfterRunTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	ran := 0
	fn := func(context.Context, *sql.Tx, idem.Period) error { ran++; return nil }
	after := idem.After("settle", idem.SamePeriod())
	res, err := idem.CatchUpTx(ctx, l, "mail", daily, fn, after)
	if err != nil || res.Periods[0].Outcome != idem.Waiting || ran != 0 {
		t.Fatalf("%+v, %v (fn ran %d times); want waiting", res, err, ran)
	}
	if _, err := idem.CatchUp(ctx, l, "settle", daily, func(context.Context, idem.Period) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if res, err := idem.CatchUpTx(ctx, l, "mail", daily, fn, after); err != nil || res.Count(idem.Ran) != 1 || ran != 1 {
		t.Fatalf("after settle: %+v, %v (fn ran %d times)", res, err, ran)
	}
}
