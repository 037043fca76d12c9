package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// fillSummaryLedger writes records of every status through the engine:
// done, failed, parked, unknown (AtMostOnce), running (a lease held by a
// claim), resolved, reset, pruned, RunTx done and RunTx failed (its claim
// kept, fn's writes rolled back), and the items of an Each.
func fillSummaryLedger(t *testing.T, l *idem.Ledger) {
	t.Helper()
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	noWait := []idem.Option{idem.RetryWithin(0), idem.WithBackoff(idem.Constant(time.Hour))}
	for d := 1; d <= 9; d++ {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", d)}, ok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Prune(ctx, "settle", "2026-10-03"); err != nil {
		t.Fatal(err)
	}
	for d := 10; d <= 12; d++ {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", d)}, func(context.Context) error {
			return errors.New("bank timeout")
		}, noWait...); err == nil {
			t.Fatal("a failing Run returned nil")
		}
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-13"}, func(context.Context) error {
		return idem.Permanent(errors.New("account closed"))
	}); err == nil {
		t.Fatal("a Permanent Run returned nil")
	}
	if err := l.Resolve(ctx, idem.Key{Job: "settle", Period: "2026-10-10"}, idem.ResolveDone); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, idem.Key{Job: "settle", Period: "2026-10-11"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if err := l.Run(ctx, idem.Key{Job: "pay", Period: p}, func(context.Context) error {
			return errors.New("connection reset while paying")
		}, idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
			t.Fatalf("AtMostOnce failure: %v, want ErrUnknownOutcome", err)
		}
	}
	if err := l.Resolve(ctx, idem.Key{Job: "pay", Period: "b"}, idem.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, idemstore.ClaimRequest{Key: idem.Key{Job: "pay", Period: "c"}, Owner: "elsewhere", Now: time.Now(), Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: "tx", Period: "1"}, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := l.RunTx(ctx, idem.Key{Job: "tx", Period: "2"}, func(context.Context, *sql.Tx) error {
		return errors.New("tx failed")
	}, noWait...); err == nil {
		t.Fatal("a failing RunTx returned nil")
	}
	items := idem.Items(slices.Values([]string{"a", "b", "c"}))
	if _, err := idem.Each(ctx, l, idem.Key{Job: "grant", Period: "2026-10-27"}, items, func(_ context.Context, item string) error {
		if item == "c" {
			return idem.Permanent(errors.New("no such account"))
		}
		return nil
	}); err != nil {
		t.Logf("idem.Each: %v", err)
	}
}

// TestSummarizeMatchesList: the ledger's Summarize (counts kept by
// triggers) says what summarizing every listed record says, for every job
// and for one, after every kind of write.
func TestSummarizeMatchesList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	fillSummaryLedger(t, l)
	checkSummary(t, l)
	one, err := l.Summarize(ctx, "pay")
	if err != nil || len(one) != 1 || one[0].Job != "pay" || one[0].Counts[idemstore.StatusUnknown] != 1 {
		t.Fatalf("Summarize(pay) = %+v, %v; want pay's summary with 1 unknown", one, err)
	}
	if none, err := l.Summarize(ctx, "nothing"); err != nil || len(none) != 0 {
		t.Fatalf("Summarize(nothing) = %+v, %v; want none", none, err)
	}
	// Every record of a job pruned: no summary of it.
	if _, err := l.Prune(ctx, "tx", "1"); err != nil {
		t.Fatal(err)
	}
	checkSummary(t, l)
}

// checkSummary compares l's Summarize with what its List says. A job's
// LastChange may be later than its records' (a pruned record's change
// counts): the fixture prunes before it changes anything else of the job.
func checkSummary(t *testing.T, l *idem.Ledger) {
	t.Helper()
	ctx := context.Background()
	recs, err := l.List(ctx, idem.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := idemstore.SummarizeRecords(recs)
	got, err := l.Summarize(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	norm := func(ss []idemstore.JobSummary) []idemstore.JobSummary {
		for i := range ss {
			ss[i].LastDoneAt, ss[i].LastChange = ss[i].LastDoneAt.UTC(), ss[i].LastChange.UTC()
		}
		return ss
	}
	if !reflect.DeepEqual(norm(got), norm(want)) {
		t.Errorf("Summarize:\n%+v\nwant (from List):\n%+v", got, want)
	}
}

// TestListPageMatchesList: ListPage returns the page that cutting List's
// answer gives (bounds, statuses, limits), the records without their
// values.
func TestListPageMatchesList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	fillSummaryLedger(t, l)
	recs, err := l.List(ctx, idem.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Value = nil
	}
	attention := []idemstore.Status{idemstore.StatusUnknown, idemstore.StatusParked, idemstore.StatusFailed}
	for _, q := range []idemstore.PageQuery{
		{Job: "settle", Limit: 100},
		{Job: "settle", Limit: 3},
		{Job: "settle", Before: "2026-10-11", Limit: 3},
		{Job: "settle", From: "2026-10-05", Before: "2026-10-12", Limit: 100},
		{Job: "settle", Statuses: attention, Limit: 100},
		{Job: "settle", Statuses: attention, Limit: 1},
		{Job: "settle", Statuses: attention, Before: "2026-10-13", Limit: 100},
		{Job: "settle", Statuses: []idemstore.Status{idemstore.StatusDone}, Limit: 100},
		{Job: "pay", Statuses: attention, Limit: 100},
		{Job: "pay", Statuses: []idemstore.Status{idemstore.StatusRunning, idemstore.StatusFailed}, Limit: 100},
		{Job: "nothing", Limit: 100},
	} {
		got, err := l.ListPage(ctx, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		want := idemstore.PageRecords(recs, q)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ListPage(%+v):\n%+v\nwant (from List):\n%+v", q, got, want)
		}
	}
	if _, err := l.ListPage(ctx, idemstore.PageQuery{Job: "settle"}); err == nil {
		t.Error("ListPage without a limit: no error")
	}
}

// TestSummaryUpgrade: a version-7 ledger (no counts, no triggers, no
// index) that holds records gets them counted when version 8 opens it,
// and keeps them counted after.
func TestSummaryUpgrade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLedger(t, dir)
	fillSummaryLedger(t, l)
	for _, q := range []string{
		`DROP TRIGGER idem_runs_count_insert`, `DROP TRIGGER idem_runs_count_update`, `DROP TRIGGER idem_runs_count_delete`,
		`DROP INDEX idem_runs_attention`, `DROP TABLE idem_job_counts`,
		`UPDATE idem_meta SET value = 7 WHERE name = 'schema_version'`,
	} {
		if _, err := l.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A version-7 process's writes.
	if err := l.Run(context.Background(), idem.Key{Job: "settle", Period: "2026-10-20"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var v int
	if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != idem.SchemaVersion {
		t.Fatalf("version %d (%v) after the upgrade, want %d", v, err, idem.SchemaVersion)
	}
	checkSummary(t, l)
	if err := l.Run(context.Background(), idem.Key{Job: "settle", Period: "2026-10-21"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	checkSummary(t, l)
	if _, err := l.ListPage(context.Background(), idemstore.PageQuery{Job: "settle", Statuses: []idemstore.Status{idemstore.StatusParked}, Limit: 10}); err != nil {
		t.Fatalf("a page of parked records after the upgrade: %v", err)
	}
}

// TestAttentionIndexRespelled: a ledger of this version whose index
// idem_runs_attention was written with the first spelling of its WHERE
// (status IN (...)) pages the records that need a look all the same, and
// is rewritten with the cheaper one (ORs) when opened: once, by one of
// several Ledger handles opening it at once (each with its connections and
// its place in the write queue, as a process has), and not again after. A process
// built before the new spelling, whose query names the index with the
// old one, gets an error from SQLite on a ledger rewritten so (NOT
// promised: that it pages it).
func TestAttentionIndexRespelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l := openLedger(t, dir)
	fillSummaryLedger(t, l)
	const (
		ors      = `status = 'unknown' OR status = 'parked' OR status = 'failed'`
		firstIn  = `status IN ('unknown', 'parked', 'failed')`
		oldQuery = `SELECT period FROM idem_runs INDEXED BY idem_runs_attention
			WHERE job = ? AND status IN (?, ?, ?) AND ` + firstIn + ` ORDER BY period DESC LIMIT 100`
	)
	spelling := func(db *sql.DB) string {
		t.Helper()
		var def string
		if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'idem_runs_attention'`).Scan(&def); err != nil {
			t.Fatal(err)
		}
		return def
	}
	cookie := func(db *sql.DB) int {
		t.Helper()
		var v int
		if err := db.QueryRow(`PRAGMA schema_version`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	oldPage := func(db *sql.DB) error {
		rows, err := db.Query(oldQuery, "settle", "unknown", "parked", "failed")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err()
	}
	attention := []idemstore.Status{idemstore.StatusUnknown, idemstore.StatusParked, idemstore.StatusFailed}
	checkPages := func(l *idem.Ledger, when string) {
		t.Helper()
		recs, err := l.List(ctx, idem.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			recs[i].Value = nil
		}
		for _, job := range []string{"settle", "pay", "grant"} {
			q := idemstore.PageQuery{Job: job, Statuses: attention, Limit: 100}
			got, err := l.ListPage(ctx, q)
			if err != nil {
				t.Fatalf("%s: ListPage(%+v): %v", when, q, err)
			}
			if want := idemstore.PageRecords(recs, q); !reflect.DeepEqual(got, want) || len(want) == 0 && job != "grant" {
				t.Errorf("%s: ListPage(%+v):\n%+v\nwant (from List):\n%+v", when, q, got, want)
			}
		}
	}

	if def := spelling(l.DB()); !strings.Contains(def, ors) {
		t.Fatalf("a new ledger's index: %s, want its WHERE spelled %s", def, ors)
	}
	if err := oldPage(l.DB()); err == nil {
		t.Fatal("the first spelling's query on an index spelled with ORs: no error")
	}
	// firstSpelling puts the index back as version 8 wrote it at first.
	firstSpelling := func(db *sql.DB) {
		t.Helper()
		for _, q := range []string{`DROP INDEX idem_runs_attention`,
			`CREATE INDEX idem_runs_attention ON idem_runs(job, period) WHERE ` + firstIn} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	firstSpelling(l.DB())
	checkPages(l, "first spelling")
	if err := oldPage(l.DB()); err != nil {
		t.Fatalf("the first spelling's query on its own index: %v", err)
	}
	// Writes go on with it: a record that needs a look joins the page.
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-14"}, func(context.Context) error {
		return idem.Permanent(errors.New("card expired"))
	}); err == nil {
		t.Fatal("a Permanent Run returned nil")
	}
	checkPages(l, "first spelling, after a write")
	before := cookie(l.DB())
	l.Close()

	// One handle opening it alone: how far one rewrite moves the schema
	// cookie.
	l1, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if def := spelling(l1.DB()); !strings.Contains(def, ors) {
		t.Fatalf("opened alone, the index: %s, want its WHERE spelled %s", def, ors)
	}
	oneRewrite := cookie(l1.DB()) - before
	if oneRewrite <= 0 {
		t.Fatalf("the schema cookie moved by %d: the index was not rewritten", oneRewrite)
	}
	firstSpelling(l1.DB())
	before = cookie(l1.DB())
	l1.Close()

	// Handles opening it at once: each opens it, one rewrites it.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			l, err := idem.OpenLedger(path)
			if err != nil {
				errs <- err
				return
			}
			errs <- l.Close()
		})
	}
	testwait.Group(t, &wg, "4 handles opening the ledger at once")
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("opening the ledger at once: %v", err)
		}
	}
	l2, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if def := spelling(l2.DB()); !strings.Contains(def, ors) {
		t.Fatalf("after the opens, the index: %s, want its WHERE spelled %s", def, ors)
	}
	rewritten := cookie(l2.DB())
	if moved := rewritten - before; moved != oneRewrite {
		t.Fatalf("opened at once, the schema cookie moved by %d, one rewrite moves it by %d", moved, oneRewrite)
	}
	checkPages(l2, "rewritten")
	if err := oldPage(l2.DB()); err == nil {
		t.Error("the first spelling's query on the rewritten index: no error")
	}
	l2.Close()
	l3, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	if c := cookie(l3.DB()); c != rewritten {
		t.Errorf("opened again: schema cookie %d, was %d: rewritten again", c, rewritten)
	}
}
