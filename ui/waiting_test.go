package ui_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/ui"
)

// waitingLedger is a ledger where settle has done 2026-10-27 only, and
// mail (after settle's same day) and report (monthly, after every day of
// settle's month) caught up on 29 October with their dependencies: mail
// waits at 2026-10-28, having settled 10-27; the report of September waits
// for September's days.
func waitingLedger(t *testing.T) (*idem.Ledger, ui.Options) {
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

// TestOverviewShowsWaiting: with the jobs' dependencies (Options.After),
// the overview says which period of a job waits for which upstream periods
// (escaped, with their status), rather than calling the job late; a job
// whose upstream is done is late again.
func TestOverviewShowsWaiting(t *testing.T) {
	l, o := waitingLedger(t)
	h := newHandler(t, l, o)
	code, body := localGet(t, h, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	for _, want := range []string{
		"2026-10-28 waits for settle/2026-10-28 (not run yet)",
		"2026-09 waits for settle/2026-09-01 (not run yet), settle/2026-09-02 (not run yet), settle/2026-09-03 (not run yet) and 27 more",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview has no %q:\n%s", want, body)
		}
	}
	if err := l.Run(context.Background(), idem.Key{Job: "settle", Period: "2026-10-28"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	_, body = localGet(t, h, "/")
	if strings.Contains(body, "2026-10-28 waits for") || !strings.Contains(body, `<span class="s-late">late</span>`) {
		t.Errorf("once settle/2026-10-28 is done, mail is late, not waiting:\n%s", body)
	}
}

// TestBrowserWaiting: the overview in a real Chromium shows the waiting
// jobs and what they wait for.
func TestBrowserWaiting(t *testing.T) {
	l, o := waitingLedger(t)
	base := serve(t, l, o)
	ctx := browser(t, false)
	step(t, ctx, "open the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#jobs")))
	jobs := text(t, ctx, "#jobs")
	if miss := has(jobs, "waiting 2026-10-28 waits for settle/2026-10-28 (not run yet)", "2026-09 waits for settle/2026-09-01"); miss != "" {
		t.Errorf("the overview has no %q:\n%s", miss, jobs)
	}
}
