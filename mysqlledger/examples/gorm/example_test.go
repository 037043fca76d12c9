package gorm_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/mysqlledger"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// Payout is a business row, written through GORM.
type Payout struct {
	Day         string `gorm:"primaryKey;size:32"`
	Account     string `gorm:"primaryKey;size:64"`
	AmountCents int64
}

// gormOn returns a GORM handle whose statements run on tx: a new session
// of gdb (opened once on the service's *sql.DB) on the ledger's
// transaction.
func gormOn(ctx context.Context, gdb *gorm.DB, tx *sql.Tx) *gorm.DB {
	g := gdb.Session(&gorm.Session{NewDB: true, Context: ctx})
	g.Statement.ConnPool = tx
	return g
}

// mysqlledger.Ledger.RunTx with GORM: the payouts created through GORM on
// the *sql.Tx commit with the day's done mark, or neither does.
// (Compiled, not run: it needs a database; docs/stores.md quotes it.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", os.Getenv("DATABASE_DSN")) // app@tcp(db:3306)/settle
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	gdb, err := gorm.Open(mysql.New(mysql.Config{Conn: db}), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	l, err := mysqlledger.New(ctx, db) // the same *sql.DB: one pool of connections
	if err != nil {
		log.Fatal(err)
	}
	day := "2026-12-05"
	err = l.RunTx(ctx, idem.Key{Job: "payouts", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		return gormOn(ctx, gdb, tx).Create(&[]Payout{
			{Day: day, Account: "acme", AmountCents: 12000},
			{Day: day, Account: "globex", AmountCents: 4500},
		}).Error
	})
	if err != nil {
		log.Print(err) // errors.Is(err, idem.ErrInProgress): another host has the day
	}
}
