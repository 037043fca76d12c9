package ui_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/ui"
	"github.com/idemgo/idem/ui/internal/uitest"
)

// listingStore is the fixture's ledger as a store that is no
// idemstore.Summarizer nor Pager (the state file, Redis, a store of your
// own): the pages cut what they show from its List.
type listingStore struct{ l *idem.Ledger }

func (s listingStore) Lookup(ctx context.Context, key idemstore.Key) (idemstore.Record, bool, error) {
	return s.l.Lookup(ctx, key)
}
func (s listingStore) Resolve(ctx context.Context, key idemstore.Key, to idemstore.Resolution) error {
	return s.l.Resolve(ctx, key, to)
}
func (s listingStore) List(ctx context.Context, f idemstore.Filter) ([]idemstore.Record, error) {
	return s.l.List(ctx, f)
}
func (s listingStore) Job(ctx context.Context, job string) (idemstore.JobState, error) {
	return s.l.Job(ctx, job)
}
func (s listingStore) CountItems(ctx context.Context, key idemstore.Key) (idemstore.ItemCounts, error) {
	return s.l.CountItems(ctx, key)
}
func (s listingStore) ListOutbox(ctx context.Context, f idemstore.OutboxFilter) ([]idemstore.OutboxRecord, error) {
	return s.l.ListOutbox(ctx, f)
}
func (s listingStore) OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error) {
	return s.l.OutboxStats(ctx)
}
func (s listingStore) RetryOutbox(ctx context.Context, id string, now time.Time) error {
	return s.l.RetryOutbox(ctx, id, now)
}
func (s listingStore) DropOutbox(ctx context.Context, id string) error {
	return s.l.DropOutbox(ctx, id)
}

// TestPagesSameWithoutSummarizer: the overview and a job's page of a
// store that only lists (read in full, cut in the handler) are the pages
// of the ledger that summarizes and pages (read in part).
func TestPagesSameWithoutSummarizer(t *testing.T) {
	f := uitest.NewFixture(t)
	if _, ok := any(f.Ledger).(idemstore.Summarizer); !ok {
		t.Fatal("the SQLite ledger is no idemstore.Summarizer")
	}
	if _, ok := any(f.Ledger).(idemstore.Pager); !ok {
		t.Fatal("the SQLite ledger is no idemstore.Pager")
	}
	now := time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC)
	o := ui.Options{Now: func() time.Time { return now }, Schedules: map[string]idem.Schedule{"settle": idem.Daily(time.UTC)}}
	paged := uitest.NewHandler(t, f.Ledger, o)
	listed := uitest.NewHandler(t, listingStore{f.Ledger}, o)
	for _, target := range []string{"/", "/job?job=settle", "/job?job=settle&before=2026-10-25", "/job?job=pay", "/job?job=nothing",
		"/job?" + url.Values{"job": {uitest.XSSJob}}.Encode()} {
		c1, b1 := localGet(t, paged, target)
		c2, b2 := localGet(t, listed, target)
		if c1 != 200 || c1 != c2 || b1 != b2 {
			t.Errorf("GET %s: %d from the ledger, %d from a store that lists; the bodies differ: %t\n%s", target, c1, c2, b1 != b2, b1)
		}
	}
}

// TestJobPages: a job of 450 daily periods shows its latest 200 records
// with a link to the older ones, whose page shows the next 200 and the
// grid of their months, whole; a before that is no period is refused.
func TestJobPages(t *testing.T) {
	ctx := context.Background()
	f := uitest.NewFixture(t)
	day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 450 {
		k := idem.Key{Job: "daily", Period: day.AddDate(0, 0, i).Format(time.DateOnly)}
		if err := f.Ledger.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// 2024-01-01 + 449 days = 2025-03-25; the 200th latest is 2024-09-07.
	h := uitest.NewHandler(t, f.Ledger, ui.Options{})
	code, body := localGet(t, h, "/job?job=daily")
	if code != 200 {
		t.Fatalf("GET /job?job=daily: %d\n%s", code, body)
	}
	for _, want := range []string{"450 records: 450 done", `href="job?job=daily&amp;before=2024-09-07"`, ">2025-03-25<", ">2024-09-07<",
		`href="record?job=daily&amp;period=2024-09-01"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the latest page has no %s", want)
		}
	}
	if n := strings.Count(body, `<tr><td><a href="record?`); n != 200 {
		t.Errorf("the latest page lists %d records, want 200", n)
	}
	if strings.Contains(body, ">2024-09-06<") || strings.Contains(body, "2024-08-31") {
		t.Error("the latest page shows an older record, or a month of none of its records")
	}
	code, body = localGet(t, h, "/job?job=daily&before=2024-09-07")
	if code != 200 {
		t.Fatalf("GET the older page: %d\n%s", code, body)
	}
	for _, want := range []string{"Records before <bdi>2024-09-07</bdi>", `href="job?job=daily"`, `href="job?job=daily&amp;before=2024-02-20"`,
		">2024-09-06<", ">2024-02-20<",
		// The grid's months whole: September's days on the latest page too.
		`class="cell c-done" href="record?job=daily&amp;period=2024-09-30"`,
		`class="cell c-done" href="record?job=daily&amp;period=2024-02-01"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the older page has no %s", want)
		}
	}
	code, body = localGet(t, h, "/job?job=daily&before=2024-02-20")
	if code != 200 || !strings.Contains(body, ">2024-01-01<") || strings.Contains(body, "Older records") {
		t.Errorf("the oldest page: %d, want the first record and no older page", code)
	}
	if code, _ := localGet(t, h, "/job?job=daily&before="+url.QueryEscape("bad\x00period")); code != 400 {
		t.Errorf("a before that is no period: %d, want 400", code)
	}
	if code, body := localGet(t, h, "/job?job=daily&before="+url.QueryEscape(`"><script>x</script>`)); code != 200 || strings.Contains(body, "<script>x") {
		t.Errorf("a before of HTML: %d, escaped: %t", code, !strings.Contains(body, "<script>x"))
	}
}

// TestOverviewAttention: the records that need a look, from the pages of
// the jobs that have some.
func TestOverviewAttention(t *testing.T) {
	f := uitest.NewFixture(t)
	h := uitest.NewHandler(t, f.Ledger, ui.Options{})
	_, body := localGet(t, h, "/")
	_, list, _ := strings.Cut(body, `<ul class="attention">`)
	for _, want := range []string{"settle</bdi> <bdi>2026-10-27", "settle</bdi> <bdi>2026-10-26", "pay</bdi> <bdi>2026-10-27", "account closed", "bank timeout"} {
		if !strings.Contains(list, want) {
			t.Errorf("needs a look: no %s in\n%s", want, list)
		}
	}
	if strings.Contains(list, "2026-10-25") {
		t.Error("needs a look lists a done record")
	}
}
