package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
)

// A job triggered three times for one period runs once.
func ExampleLedger_Run() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	for range 3 {
		var res idem.Result
		err := l.Run(context.Background(), key, func(ctx context.Context) error {
			fmt.Println("sending the report for", key.Period)
			return nil
		}, idem.ReportTo(&res))
		fmt.Println(res.Outcome, err)
	}
	// Output:
	// sending the report for 2026-10-27
	// ran <nil>
	// already_done <nil>
	// already_done <nil>
}

// The settlement of a business day: recompute the amount from the flow table
// and upsert it by date, in the same transaction as the done mark.
func ExampleLedger_RunTx() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	_, err = l.DB().ExecContext(ctx, `
		CREATE TABLE flow(biz_date TEXT NOT NULL, amount_cent INTEGER NOT NULL);
		CREATE TABLE daily_settle(biz_date TEXT PRIMARY KEY, amount_cent INTEGER NOT NULL);
		INSERT INTO flow VALUES ('2026-10-27', 1000), ('2026-10-27', 500), ('2026-10-28', 700);`)
	if err != nil {
		log.Fatal(err)
	}

	day := "2026-10-27"
	settle := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO daily_settle(biz_date, amount_cent)
			SELECT ?, coalesce(sum(amount_cent), 0) FROM flow WHERE biz_date = ?
			ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent
			WHERE daily_settle.amount_cent <> excluded.amount_cent`, day, day)
		return err
	}
	for range 2 {
		if err := l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: day}, settle); err != nil {
			log.Fatal(err)
		}
	}
	var amount int
	_ = l.DB().QueryRowContext(ctx, `SELECT amount_cent FROM daily_settle WHERE biz_date = ?`, day).Scan(&amount)
	fmt.Println(day, amount)
	// Output:
	// 2026-10-27 1500
}

// Callers tell the outcomes apart with errors.Is and errors.As.
func ExampleError() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, _ := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	defer l.Close()

	errDown := errors.New("gateway refused the connection")
	err := l.Run(context.Background(), idem.Key{Job: "push", Period: "2026-10-27"},
		func(ctx context.Context) error { return idem.Permanent(errDown) })
	var e *idem.Error
	switch {
	case errors.Is(err, idem.ErrParked) && errors.As(err, &e):
		fmt.Println("parked:", e.Key, "after attempt", e.Attempt, "-", errors.Is(err, errDown))
	case errors.Is(err, idem.ErrInProgress):
		fmt.Println("another run holds it")
	}
	// Output:
	// parked: push/2026-10-27 after attempt 1 - true
}

// Retry on its own, without a store.
func ExampleRetry() {
	calls := 0
	err := idem.Retry(context.Background(), idem.MaxAttempts(3, idem.Constant(0)), func(ctx context.Context) error {
		calls++
		return errors.New("still down")
	})
	fmt.Println(calls, errors.Is(err, idem.ErrParked))
	// Output:
	// 3 true
}
