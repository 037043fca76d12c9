package compattest_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	_ "github.com/jackc/pgx/v5/stdlib" // or _ "github.com/lib/pq"
	"github.com/jmoiron/sqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// payout is a business row, written with sqlx's named parameters.
type payout struct {
	Day         string `db:"day"`
	Account     string `db:"account"`
	AmountCents int64  `db:"amount_cents"`
}

// insertPayout writes p through sqlx on the ledger's transaction: dbx binds
// the named parameters for its driver, and the statement runs on tx, so it
// commits with the done mark or not at all.
func insertPayout(ctx context.Context, dbx *sqlx.DB, tx *sql.Tx, table string, p payout) error {
	q, args, err := dbx.BindNamed(`INSERT INTO `+table+` (day, account, amount_cents)
		VALUES (:day, :account, :amount_cents)`, p)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// pgledger.NewDB with sqlx: the ledger on the service's own *sql.DB (here
// with pgx's stdlib driver), and RunTx's *sql.Tx given to sqlx, so the
// payout written through sqlx commits with the day's done mark.
// (Compiled, not run: it needs a database; docs/stores.md quotes it.)
func Example_sqlx() {
	ctx := context.Background()
	dbx, err := sqlx.Open("pgx", os.Getenv("DATABASE_URL")) // lib/pq: sqlx.Open("postgres", ...)
	if err != nil {
		log.Fatal(err)
	}
	defer dbx.Close()
	l, err := pgledger.NewDB(ctx, dbx.DB) // the same *sql.DB: one pool of connections
	if err != nil {
		log.Fatal(err)
	}
	day := "2026-10-27"
	err = l.RunTx(ctx, idem.Key{Job: "payouts", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		return insertPayout(ctx, dbx, tx, "payouts", payout{Day: day, Account: "acme", AmountCents: 12000})
	})
	if err != nil {
		log.Print(err) // errors.Is(err, idem.ErrInProgress): another host has the day
	}
}

// gormOn returns a GORM handle whose statements run on tx: a new session of
// gdb (opened once on the service's *sql.DB) on the ledger's transaction,
// as GORM's own Begin makes one on the transaction it opens.
func gormOn(ctx context.Context, gdb *gorm.DB, tx *sql.Tx) *gorm.DB {
	g := gdb.Session(&gorm.Session{NewDB: true, Context: ctx})
	g.Statement.ConnPool = tx
	return g
}

// DBLedger.RunTx with GORM: the payout created through GORM on the
// *sql.Tx commits with the day's done mark. (Compiled, not run: it needs a
// database; docs/stores.md quotes it.)
func Example_gorm() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	l, err := pgledger.NewDB(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	day := "2026-10-27"
	err = l.RunTx(ctx, idem.Key{Job: "payouts", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		return gormOn(ctx, gdb, tx).Table("payouts").Create(&payout{Day: day, Account: "acme", AmountCents: 12000}).Error
	})
	if err != nil {
		log.Print(err)
	}
}
