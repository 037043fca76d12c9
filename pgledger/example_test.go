package pgledger_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The settlement of a business day, from any number of hosts: its rows and
// idem's done mark commit in one PostgreSQL transaction, so the day is
// settled exactly once however often, and wherever, the job is triggered.
// (Compiled, not run: it needs a database.)
func Example() {
	ctx := context.Background()
	l, err := pgledger.Open(ctx, os.Getenv("SETTLE_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	day := "2026-10-27" // the business day this run settles, not the time it started
	var res idem.Result
	err = l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: day}, func(ctx context.Context, tx pgx.Tx) error {
		// Recompute from the flow table and upsert by date: never amount = amount + $1.
		_, err := tx.Exec(ctx, `
			INSERT INTO daily_settle(biz_date, amount_cent)
			SELECT $1, coalesce(sum(amount_cent), 0) FROM flow WHERE biz_date = $1
			ON CONFLICT (biz_date) DO UPDATE SET amount_cent = excluded.amount_cent`, day)
		return err
	}, idem.ReportTo(&res))
	switch {
	case errors.Is(err, idem.ErrInProgress):
		log.Printf("%s: another host is settling it", day)
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("%s: %v", day, res.Outcome) // ran, or already_done
	}
}

// New attaches the ledger to the application's own pool: the ledger's tables
// live in their own schema of the application's database, and RunTx commits
// the application's writes with the done mark.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	l, err := pgledger.New(ctx, pool,
		pgledger.WithSchema("settle_idem"),
		pgledger.WithRunOptions(idem.WithLease(idem.DefaultLease), idem.AtMostOnce()))
	if err != nil {
		log.Fatal(err) // errors.Is(err, idem.ErrNewerSchema): a newer pgledger wrote this schema
	}
	// A job with an effect outside the database: AtMostOnce (the default
	// set above) never sends it twice.
	err = l.Run(ctx, idem.Key{Job: "month_end_mail", Period: "2026-10"}, func(ctx context.Context) error {
		return nil // send the mail
	})
	if err != nil {
		log.Print(err)
	}
}
