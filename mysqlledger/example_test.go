package mysqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/mysqlledger"
)

// The README's settlement on MySQL or MariaDB: the ledger on the service's
// own *sql.DB, and the day's total upserted in RunTx's transaction, which
// commits it with the day's done mark. (Compiled, not run: it needs a
// database; docs/stores.md quotes it.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", os.Getenv("SETTLE_DSN")) // app@tcp(db:3306)/settle
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetConnMaxIdleTime(5 * time.Minute) // below the server's wait_timeout
	l, err := mysqlledger.New(ctx, db)
	if err != nil {
		log.Fatal(err) // mysqlledger.ErrWeakDurability: innodb_flush_log_at_trx_commit is not 1
	}

	day := "2026-12-05" // the business day this run settles, not the time it started
	var res idem.Result
	err = l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		// Recompute from the flow table and upsert by date: never amount = amount + ?.
		_, err := tx.ExecContext(ctx, `
			INSERT INTO daily_settle (biz_date, amount_cent)
			SELECT ?, COALESCE(SUM(amount_cent), 0) FROM flow WHERE biz_date = ?
			ON DUPLICATE KEY UPDATE amount_cent = VALUES(amount_cent)`, day, day)
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
