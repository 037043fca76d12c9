package idem_test

// The code that README.md and docs/*.md quote, compiled and run here
// (TestDocsGoSnippets checks that every Go block of the README and of the
// docs pages appears in a .go file).

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
)

// mailReport stands for a job's work: here it prints what it would mail.
func mailReport(ctx context.Context, day string) error {
	fmt.Println("mailing the report for", day)
	return nil
}

// sendDailyReport is the README's first example: the package-level Run.
func sendDailyReport(ctx context.Context, now time.Time) error {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		return err
	}
	day := idem.LastPeriod(idem.Daily(shanghai), now).Name // yesterday in the business zone: "2026-10-27"
	return idem.Run(ctx, idem.Key{Job: "daily_report", Period: day}, func(ctx context.Context) error {
		return mailReport(ctx, day) // not run again once the day is done
	})
}

// The README's first example: a report triggered three times (cron, a
// retry, a person) is mailed once.
func Example_sendDailyReport() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	idem.SetDefault(l) // without it, Run keeps its ledger at $IDEM_LEDGER or DefaultLedgerPath
	defer idem.SetDefault(nil)

	now := time.Date(2026, 10, 28, 2, 0, 0, 0, time.FixedZone("CST", 8*3600)) // 02:00 in Shanghai
	for range 3 {
		if err := sendDailyReport(context.Background(), now); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// mailing the report for 2026-10-27
}

// settleYesterday settles yesterday's flow (a business day in Shanghai)
// once, however often it is called.
func settleYesterday(ctx context.Context, path string, now time.Time) error {
	l, err := idem.OpenLedger(path)
	if err != nil {
		return err
	}
	defer l.Close()

	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		return err
	}
	day := idem.LastPeriod(idem.Daily(shanghai), now).Name // yesterday in the business zone: "2026-10-27"
	return l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		// Recompute from the flow table and upsert by date: never amount = amount + ?.
		_, err := tx.ExecContext(ctx, `
			INSERT INTO daily_settle(biz_date, amount_cent)
			SELECT ?, coalesce(sum(amount_cent), 0) FROM flow WHERE biz_date = ?
			ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent
			WHERE daily_settle.amount_cent <> excluded.amount_cent`, day, day)
		return err
	})
}

// The README's RunTx example: a settlement triggered twice settles once.
func Example_settleYesterday() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.db")
	// The business tables live in the ledger's database (created by
	// OpenLedger first: it refuses another application's database).
	l, err := idem.OpenLedger(path)
	if err != nil {
		log.Fatal(err)
	}
	_, err = l.DB().Exec(`
		CREATE TABLE flow(biz_date TEXT NOT NULL, amount_cent INTEGER NOT NULL);
		CREATE TABLE daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL);
		INSERT INTO flow VALUES ('2026-10-27', 1000), ('2026-10-27', 500), ('2026-10-28', 700);`)
	l.Close()
	if err != nil {
		log.Fatal(err)
	}

	now := time.Date(2026, 10, 28, 2, 0, 0, 0, time.FixedZone("CST", 8*3600)) // 02:00 in Shanghai
	for range 2 {
		if err := settleYesterday(context.Background(), path, now); err != nil {
			log.Fatal(err)
		}
	}
	l, _ = idem.OpenLedger(path)
	defer l.Close()
	var amount int
	_ = l.DB().QueryRow(`SELECT amount_cent FROM daily_settle WHERE biz_date = '2026-10-27'`).Scan(&amount)
	fmt.Println(amount)
	// Output:
	// 1500
}

// The period a job triggered at 02:00 does: the day that has ended.
func ExampleDaily() {
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	now := time.Date(2026, 10, 28, 2, 0, 0, 0, shanghai)
	day := idem.LastPeriod(idem.Daily(shanghai), now) // the 02:00 run settles yesterday: 2026-10-27
	fmt.Println(day.Name, day.Start.Format(time.RFC3339), day.End.Format(time.RFC3339))
	// Output:
	// 2026-10-27 2026-10-27T00:00:00+08:00 2026-10-28T00:00:00+08:00
}
