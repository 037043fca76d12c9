package pgledger_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	_ "github.com/jackc/pgx/v5/stdlib" // or _ "github.com/lib/pq"
)

// NewDB attaches the ledger to the service's own *sql.DB (here with pgx's
// stdlib driver): RunTx hands fn a *sql.Tx on it, and the payout written on
// it commits with the day's done mark. sqlx, GORM and ent work on the same
// *sql.Tx (docs/stores.md). (Compiled, not run: it needs a database.)
func ExampleNewDB() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // lib/pq: sql.Open("postgres", ...)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(16)            // the calls made at once (database/sql keeps 2: see NewDB)
	l, err := pgledger.NewDB(ctx, db) // the service's *sql.DB: one pool of connections
	if err != nil {
		log.Fatal(err)
	}
	day := "2026-10-27"
	err = l.RunTx(ctx, idem.Key{Job: "payouts", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO payouts (day, account, amount_cents) VALUES ($1, $2, $3)`, day, "acme", 12000)
		return err
	})
	if err != nil {
		log.Print(err) // errors.Is(err, idem.ErrInProgress): another host has the day
	}
}
