package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The CatchUpTx tests: a daily job whose business rows (table settled, n
// counting the commits that wrote a row, so that a second one shows) commit
// with each period's done mark and the job's cursor.

var daily = idem.Daily(time.UTC)

// cuDay is 2026-10-01 + n days at 02:00 UTC: the day before is due.
func cuDay(n int) time.Time { return time.Date(2026, 10, 1+n, 2, 0, 0, 0, time.UTC) }

func cuDays(first, n int) []string {
	var s []string
	for i := range n {
		s = append(s, cuDay(first+i).Format(time.DateOnly))
	}
	return s
}

func createSettled(ctx context.Context, l *pgledger.Ledger) error {
	_, err := l.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table(l, "settled")+` (period text PRIMARY KEY, n int NOT NULL)`)
	return err
}

func settleIn(l *pgledger.Ledger) func(ctx context.Context, tx pgx.Tx, p idem.Period) error {
	return func(ctx context.Context, tx pgx.Tx, p idem.Period) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+table(l, "settled")+` AS s (period, n) VALUES ($1, 1)
			ON CONFLICT (period) DO UPDATE SET n = s.n + 1`, p.Name)
		return err
	}
}

// wantCommitted fails t unless exactly the periods want are committed: each
// with its business row, written by one commit, and its done mark, and the
// cursor at the last of them.
func wantCommitted(t *testing.T, l *pgledger.Ledger, job string, want []string) {
	t.Helper()
	ctx := context.Background()
	rows := map[string]int{}
	r, err := l.Pool().Query(ctx, `SELECT period, n FROM `+table(l, "settled"))
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var p string
		var n int
		if err := r.Scan(&p, &n); err != nil {
			t.Fatal(err)
		}
		rows[p] = n
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	recs, err := l.List(ctx, idem.Filter{Job: job, Status: idem.StatusDone})
	if err != nil {
		t.Fatal(err)
	}
	var done []string
	for _, rec := range recs {
		done = append(done, rec.Key.Period)
	}
	js, err := l.Job(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	wantRows := map[string]int{}
	for _, p := range want {
		wantRows[p] = 1
	}
	if !maps.Equal(rows, wantRows) || !slices.Equal(done, want) || js.Cursor != want[len(want)-1] {
		t.Fatalf("business rows %v, done %v, cursor %q; want each of %v once, done, and cursor %s",
			rows, done, js.Cursor, want, want[len(want)-1])
	}
}

func openSettleLedger(t *testing.T, pool *pgxpool.Pool, clk idem.Clock) *pgledger.Ledger {
	t.Helper()
	l := openLedger(t, pool, pgledger.WithRunOptions(idem.WithClock(clk)))
	if err := createSettled(context.Background(), l); err != nil {
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
	clk := idemtest.NewClock(cuDay(1))
	l := openSettleLedger(t, newPool(t), clk)
	if _, err := idem.CatchUpTx(ctx, l, "settle", daily, settleIn(l)); err != nil {
		t.Fatal(err)
	}
	wantCommitted(t, l, "settle", cuDays(0, 1))
	clk.Set(cuDay(4)) // down on the 2nd, 3rd and 4th
	res, err := idem.CatchUpTx(ctx, l, "settle", daily, settleIn(l))
	if err != nil || res.Count(idem.Ran) != 3 || res.Cursor != "2026-10-04" {
		t.Fatalf("after downtime: %v, %d ran, cursor %q", err, res.Count(idem.Ran), res.Cursor)
	}
	wantCommitted(t, l, "settle", cuDays(0, 4))
	if res, err := idem.CatchUpTx(ctx, l, "settle", daily, settleIn(l)); err != nil || len(res.Periods) != 0 {
		t.Fatalf("second call: %v, %+v", err, res.Periods)
	}
	wantCommitted(t, l, "settle", cuDays(0, 4))
}

// TestCatchUpTxFailingPeriodRollsBack: a period whose fn fails after
// writing stops the catch-up, with its writes rolled back and the cursor
// before it; the next call (after the backoff) runs it and the rest.
func TestCatchUpTxFailingPeriodRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(cuDay(4))
	l := openSettleLedger(t, newPool(t), clk)
	settle := settleIn(l)
	failing := func(ctx context.Context, tx pgx.Tx, p idem.Period) error {
		if err := settle(ctx, tx, p); err != nil {
			return err
		}
		if p.Name == "2026-10-03" {
			return errors.New("the bank's file is missing")
		}
		return nil
	}
	res, err := idem.CatchUpTx(ctx, l, "settle", daily, failing, idem.Since(cuDay(1)), idem.OneAttempt())
	if !errors.Is(err, idem.ErrBackingOff) || !strings.Contains(err.Error(), "2026-10-03") || res.Deferred != 1 || res.Cursor != "2026-10-02" {
		t.Fatalf("failing period: %v, deferred %d, cursor %q", err, res.Deferred, res.Cursor)
	}
	wantCommitted(t, l, "settle", []string{"2026-10-02"})
	shift(t, l, time.Hour) // past the backoff, on the server's clock
	if _, err := idem.CatchUpTx(ctx, l, "settle", daily, settle, idem.OneAttempt()); err != nil {
		t.Fatal(err)
	}
	wantCommitted(t, l, "settle", cuDays(1, 3))
}

// TestCatchUpTxCrashInTransaction stops CatchUpTx inside the second
// period's transaction, after fn and before the commit: neither its
// business row nor its done mark nor a cursor move remain, and the next
// call, past the crashed attempt's lease, completes every period once.
func TestCatchUpTxCrashInTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := idemtest.NewClock(cuDay(4))
	l := openSettleLedger(t, newPool(t), clk)
	crash := idemtest.CrashWhen(ctx, func(p idemstore.Point, k idem.Key) bool {
		return p == idemstore.AfterFn && k.Period == "2026-10-03"
	})
	if _, err := idem.CatchUpTx(crash, l, "settle", daily, settleIn(l), idem.Since(cuDay(1))); !errors.Is(err, idemtest.ErrCrashed) {
		t.Fatalf("crashing call: %v", err)
	}
	wantCommitted(t, l, "settle", []string{"2026-10-02"})
	shift(t, l, idem.DefaultLease+time.Second)
	res, err := idem.CatchUpTx(ctx, l, "settle", daily, settleIn(l))
	if err != nil || res.Count(idem.Ran) != 2 {
		t.Fatalf("recovery: %v, %+v", err, res.Periods)
	}
	wantCommitted(t, l, "settle", cuDays(1, 3))
}

// TestCatchUpTxKilled SIGKILLs a child process (this test binary,
// re-executed, with a pool of its own) inside the transaction of the second
// of three due periods; the server rolls it back, and the next CatchUpTx
// completes every period exactly once.
func TestCatchUpTxKilled(t *testing.T) {
	t.Parallel()
	testDSN(t)
	job := func(ctx context.Context, l *pgledger.Ledger) (idem.CatchUpResult, error) {
		return idem.CatchUpTx(ctx, l, "settle", daily, settleIn(l), idem.WithClock(idemtest.NewClock(cuDay(4))), idem.Since(cuDay(1)))
	}
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(schema string) { // does not return
			ctx := context.Background()
			l, err := openChildLedger(ctx, eachEnv{schema: schema})
			if err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
			kill := idemtest.KillWhen(ctx, func(p idemstore.Point, k idem.Key) bool {
				return p == idemstore.AfterFn && k.Period == "2026-10-03"
			})
			_, err = job(kill, l)
			fmt.Println("not killed:", err)
			os.Exit(3)
		})
	}
	l := openSettleLedger(t, newPool(t), idemtest.NewClock(cuDay(4)))
	exit := idemtest.Fork(t, l.Schema(), nil)
	if !exit.Killed {
		t.Fatalf("child not killed: %+v", exit)
	}
	wantCommitted(t, l, "settle", []string{"2026-10-02"})
	shift(t, l, idem.DefaultLease+time.Second) // the dead child's lease
	res, err := job(context.Background(), l)
	if err != nil || res.Count(idem.Ran) != 2 {
		t.Fatalf("recovery: %v, %+v", err, res.Periods)
	}
	wantCommitted(t, l, "settle", cuDays(1, 3))
}
