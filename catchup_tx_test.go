package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
)

// TestRunInsideItsOwnRunFailsAtOnce: RunTx (or Run) called inside fn for
// the key that the enclosing Run holds cannot work (it would find its own
// key held). It fails at once, saying to use idem.CatchUpTx, and the period is
// parked at once instead of after retrying a call that cannot succeed.
func TestRunInsideItsOwnRunFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewAutoClock(day(1))
	l := openLedger(t, t.TempDir(), idem.WithClock(clk))
	calls, inner := 0, 0
	res, err := idem.CatchUp(ctx, l, "settle", daily, func(ctx context.Context, p idem.Period) error {
		calls++
		return l.RunTx(ctx, idem.Key{Job: "settle", Period: p.Name}, func(context.Context, *sql.Tx) error { inner++; return nil })
	})
	if !errors.Is(err, idem.ErrNestedRun) || !strings.Contains(err.Error(), "idem.CatchUpTx") || calls != 1 || inner != 0 {
		t.Fatalf("RunTx inside CatchUp's fn: %v; fn called %d times, the inner fn %d; want one call, an error naming idem.CatchUpTx", err, calls, inner)
	}
	if len(res.Periods) != 1 || res.Periods[0].Outcome != idem.Parked {
		t.Fatalf("periods %+v, want 2026-10-01 given up", res.Periods)
	}

	// A plain Run nested in a Run of the same key, too.
	k := idem.Key{Job: "pay", Period: "2026-10-01"}
	err = l.Run(ctx, k, func(ctx context.Context) error {
		return l.Run(ctx, k, func(context.Context) error { inner++; return nil })
	})
	if !errors.Is(err, idem.ErrNestedRun) || !errors.Is(err, idem.ErrParked) || inner != 0 {
		t.Fatalf("Run inside its own Run: %v, inner fn ran %d times", err, inner)
	}
	// Each for the period of the Run it runs in cannot mark the period done
	// (it used to wait for its own key until its context ended).
	ek := idem.Key{Job: "grant", Period: "2026-10-01"}
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	applied := 0
	err = l.Run(ectx, ek, func(ctx context.Context) error {
		_, err := idem.Each(ctx, l, ek, accounts(3), func(context.Context, string) error { applied++; return nil })
		return err
	})
	if !errors.Is(err, idem.ErrNestedRun) || ectx.Err() != nil || applied != 0 {
		t.Fatalf("Each inside the Run of its own period: %v (context: %v), %d items applied; want ErrNestedRun before any item",
			err, ectx.Err(), applied)
	}
	// A Run of another key inside a Run works as ever.
	other := idem.Key{Job: "pay", Period: "2026-10-02"}
	if err := l.Run(ctx, other, func(ctx context.Context) error {
		return l.Run(ctx, idem.Key{Job: "mail", Period: "2026-10-02"}, func(context.Context) error { inner++; return nil })
	}); err != nil || inner != 1 {
		t.Fatalf("Run of another key inside a Run: %v, inner fn ran %d times", err, inner)
	}
}

// settledTable is the business table of the CatchUpTx tests: one row per
// period, counting the commits that wrote it (n = n + 1, so that a second
// commit shows; a real job would recompute and upsert).
const settledTable = `CREATE TABLE IF NOT EXISTS settled(period TEXT PRIMARY KEY, n INTEGER NOT NULL)`

func settlePeriod(ctx context.Context, tx *sql.Tx, p idem.Period) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO settled(period, n) VALUES(?, 1) ON CONFLICT(period) DO UPDATE SET n = n + 1`, p.Name)
	return err
}

// txState is what a CatchUpTx job left in the ledger's database: the
// business rows' commit counts, the done periods, and the job's cursor.
func txState(t *testing.T, l *idem.Ledger, job string) (rows map[string]int, done []string, cursor string) {
	t.Helper()
	ctx := context.Background()
	rows = map[string]int{}
	r, err := l.DB().QueryContext(ctx, `SELECT period, n FROM settled ORDER BY period`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var p string
		var n int
		if err := r.Scan(&p, &n); err != nil {
			t.Fatal(err)
		}
		rows[p] = n
	}
	recs, err := l.List(ctx, idem.Filter{Job: job, Status: idem.StatusDone})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		done = append(done, rec.Key.Period)
	}
	js, err := l.Job(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	return rows, done, js.Cursor
}

// wantTxState fails t unless exactly the periods want are committed: each
// has its business row, written by one commit, and its done mark, and the
// cursor is the last of them.
func wantTxState(t *testing.T, l *idem.Ledger, job string, want []string) {
	t.Helper()
	rows, done, cursor := txState(t, l, job)
	wantRows := map[string]int{}
	for _, p := range want {
		wantRows[p] = 1
	}
	if !maps.Equal(rows, wantRows) || !slices.Equal(done, want) || cursor != want[len(want)-1] {
		t.Fatalf("business rows %v, done %v, cursor %q; want each of %v once, done, and cursor %s",
			rows, done, cursor, want, want[len(want)-1])
	}
}

func openTxLedger(t *testing.T, dir string, opts ...idem.Option) *idem.Ledger {
	t.Helper()
	l := openLedger(t, dir, opts...)
	if _, err := l.DB().Exec(settledTable); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCatchUpTxAfterDowntime: after three days of downtime, CatchUpTx
// commits each missed period's business row, done mark and cursor
// together, oldest first; a second call does nothing.
func TestCatchUpTxAfterDowntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(day(1))
	l := openTxLedger(t, t.TempDir(), idem.WithClock(clk))
	if _, err := idem.CatchUpTx(ctx, l, "settle", daily, settlePeriod); err != nil {
		t.Fatal(err)
	}
	wantTxState(t, l, "settle", names(0, 1))
	clk.Set(day(4)) // down on the 2nd, 3rd and 4th
	var seen []string
	res, err := idem.CatchUpTx(ctx, l, "settle", daily, settlePeriod, idem.OnPeriod(func(pr idem.PeriodResult) {
		// Each period is committed, cursor and all, before the next runs.
		_, _, cursor := txState(t, l, "settle")
		seen = append(seen, pr.Period.Name+"@"+cursor)
	}))
	if err != nil || res.Count(idem.Ran) != 3 || res.Cursor != "2026-10-04" {
		t.Fatalf("after downtime: %v, %d ran, cursor %q", err, res.Count(idem.Ran), res.Cursor)
	}
	if want := []string{"2026-10-02@2026-10-02", "2026-10-03@2026-10-03", "2026-10-04@2026-10-04"}; !slices.Equal(seen, want) {
		t.Fatalf("period@cursor after each period: %v, want %v", seen, want)
	}
	wantTxState(t, l, "settle", names(0, 4))
	res, err = idem.CatchUpTx(ctx, l, "settle", daily, settlePeriod)
	if err != nil || len(res.Periods) != 0 {
		t.Fatalf("second call: %v, %+v", err, res.Periods)
	}
	wantTxState(t, l, "settle", names(0, 4))
}

// TestCatchUpTxFailingPeriodRollsBack: a period whose fn fails after
// writing stops the catch-up; its writes are rolled back, the cursor stays
// before it, and the next call runs it and the rest.
func TestCatchUpTxFailingPeriodRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(day(4))
	l := openTxLedger(t, t.TempDir(), idem.WithClock(clk))
	failing := func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		if err := settlePeriod(ctx, tx, p); err != nil {
			return err
		}
		if p.Name == "2026-10-03" {
			return errors.New("the bank's file is missing")
		}
		return nil
	}
	res, err := idem.CatchUpTx(ctx, l, "settle", daily, failing, idem.Since(day(1)), idem.OneAttempt())
	if !errors.Is(err, idem.ErrBackingOff) || !strings.Contains(err.Error(), "2026-10-03") || res.Deferred != 1 || res.Cursor != "2026-10-02" {
		t.Fatalf("failing period: %v, deferred %d, cursor %q", err, res.Deferred, res.Cursor)
	}
	wantTxState(t, l, "settle", []string{"2026-10-02"})
	if rec := mustLookup(t, l, idem.Key{Job: "settle", Period: "2026-10-03"}); rec.Status != idem.StatusFailed {
		t.Fatalf("the failed period: %+v", rec)
	}
	clk.Advance(time.Hour) // past its backoff
	if _, err := idem.CatchUpTx(ctx, l, "settle", daily, settlePeriod, idem.OneAttempt()); err != nil {
		t.Fatal(err)
	}
	wantTxState(t, l, "settle", names(1, 3))
}

// TestCatchUpTxCrashInTransaction stops CatchUpTx inside the second
// period's transaction (after fn, before the commit), as a crash would:
// that period leaves neither its business row nor its done mark nor a
// cursor move, and the next call completes every period exactly once. The
// period either has no record yet (one transaction claims, runs and marks
// it) or failed once before (the claim is its own transaction; FinishTx's
// transaction is the one that crashes).
func TestCatchUpTxCrashInTransaction(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"first-attempt", "after-a-failure"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := idemtest.NewClock(day(4))
			l := openTxLedger(t, t.TempDir(), idem.WithClock(clk))
			opts := []idem.Option{idem.Since(day(1)), idem.OneAttempt()}
			if path == "after-a-failure" {
				fail := func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
					if p.Name == "2026-10-03" {
						return errors.New("not yet")
					}
					return settlePeriod(ctx, tx, p)
				}
				if _, err := idem.CatchUpTx(ctx, l, "settle", daily, fail, opts...); !errors.Is(err, idem.ErrBackingOff) {
					t.Fatalf("failing call: %v", err)
				}
				clk.Advance(time.Hour)
			}
			crash := idemtest.CrashWhen(ctx, func(p idemstore.Point, k idem.Key) bool {
				return p == idemstore.AfterFn && k.Period == "2026-10-03"
			})
			_, err := idem.CatchUpTx(crash, l, "settle", daily, settlePeriod, opts...)
			if !errors.Is(err, idemtest.ErrCrashed) {
				t.Fatalf("crashing call: %v", err)
			}
			wantTxState(t, l, "settle", []string{"2026-10-02"})
			clk.Advance(idem.DefaultLease + time.Second) // the crashed attempt's lease, if it has one
			res, err := idem.CatchUpTx(ctx, l, "settle", daily, settlePeriod, opts...)
			if err != nil || res.Count(idem.Ran) != 2 {
				t.Fatalf("recovery: %v, %+v", err, res.Periods)
			}
			wantTxState(t, l, "settle", names(1, 3))
		})
	}
}

// TestCatchUpTxKilled SIGKILLs a child process inside the transaction of
// the second of three due periods; the next CatchUpTx, in this process,
// completes every period exactly once.
func TestCatchUpTxKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := func(ctx context.Context, dir string, now time.Time) (idem.CatchUpResult, error) {
		l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"), idem.WithClock(idemtest.NewClock(now)))
		if err != nil {
			return idem.CatchUpResult{}, err
		}
		defer l.Close()
		if _, err := l.DB().Exec(settledTable); err != nil {
			return idem.CatchUpResult{}, err
		}
		return idem.CatchUpTx(ctx, l, "settle", daily, settlePeriod, idem.Since(day(1)))
	}
	exit := idemtest.Fork(t, dir, func(dir string) {
		ctx := idemtest.KillWhen(context.Background(), func(p idemstore.Point, k idem.Key) bool {
			return p == idemstore.AfterFn && k.Period == "2026-10-03"
		})
		_, err := job(ctx, dir, day(4))
		fmt.Println("not killed:", err)
		os.Exit(3)
	})
	if !exit.Killed {
		t.Fatalf("child not killed: %+v", exit)
	}
	l := openLedger(t, dir)
	wantTxState(t, l, "settle", []string{"2026-10-02"})
	res, err := job(context.Background(), dir, day(4).Add(idem.DefaultLease+time.Second))
	if err != nil || res.Count(idem.Ran) != 2 {
		t.Fatalf("recovery: %v, %+v", err, res.Periods)
	}
	wantTxState(t, l, "settle", names(1, 3))
}
