package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// A daily job triggered by cron calls idem.CatchUp instead of idem.Run: after three
// days of downtime, its next trigger settles the days it missed, oldest
// first. (A fake clock stands for the days passing.)
func ExampleCatchUp() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	settle := func(ctx context.Context, p idem.Period) error {
		fmt.Println("settling", p.Name)
		return nil
	}
	daily := idem.Daily(time.UTC)
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))

	// The job's first trigger, at 02:00 on 28 October: the day that ended.
	if _, err := idem.CatchUp(context.Background(), l, "daily_settle", daily, settle, idem.WithClock(clk)); err != nil {
		log.Fatal(err)
	}
	// The host is down until 02:00 on 31 October.
	clk.Advance(3 * 24 * time.Hour)
	res, err := idem.CatchUp(context.Background(), l, "daily_settle", daily, settle, idem.WithClock(clk))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Count(idem.Ran), "periods ran; cursor", res.Cursor)
	// Output:
	// settling 2026-10-27
	// settling 2026-10-28
	// settling 2026-10-29
	// settling 2026-10-30
	// 3 periods ran; cursor 2026-10-30
}

// A daily settlement that was down for three days catches up: each missed
// day's rows, its done mark and the job's cursor commit in one transaction.
func ExampleCatchUpTx() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	settle := func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO daily_settle(biz_date, amount_cent) VALUES (?, 1500)
			ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent`, p.Name)
		return err
	}
	utc := idem.Daily(time.UTC)
	// The job's first run, at 02:00 on 28 October, settles the 27th.
	first := idem.WithClock(idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC)))
	if _, err := idem.CatchUpTx(ctx, l, "daily_settle", utc, settle, first); err != nil {
		log.Fatal(err)
	}
	// The host is down until the 31st: the 28th, 29th and 30th are due.
	later := idem.WithClock(idemtest.NewClock(time.Date(2026, 10, 31, 2, 0, 0, 0, time.UTC)))
	res, err := idem.CatchUpTx(ctx, l, "daily_settle", utc, settle, later)
	if err != nil {
		log.Fatal(err)
	}
	for _, pr := range res.Periods {
		fmt.Println(pr.Period.Name, pr.Outcome)
	}
	fmt.Println("cursor", res.Cursor)
	// Output:
	// 2026-10-28 ran
	// 2026-10-29 ran
	// 2026-10-30 ran
	// cursor 2026-10-30
}
