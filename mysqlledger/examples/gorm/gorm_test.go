package gorm_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/mysqlledger"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// TestGORMRunTx: on the real server, RunTx with business rows written
// through GORM: a failing attempt leaves neither rows nor done mark; the
// next attempt commits both; a later RunTx of the day does not run.
func TestGORMRunTx(t *testing.T) {
	dsn := os.Getenv("IDEM_TEST_MYSQL_DSN")
	if dsn == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatal("IDEM_TEST_MYSQL_DSN is not set, and CI must run the MySQL tests")
		}
		t.Skip("no MySQL: run scripts/test.sh, or set IDEM_TEST_MYSQL_DSN=user@tcp(host:port)/db")
	}
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var b [5]byte
	_, _ = rand.Read(b[:])
	prefix := "gorm" + hex.EncodeToString(b[:]) + "_"
	table := prefix + "payouts"
	t.Cleanup(func() {
		for _, n := range []string{"payouts", "meta", "runs", "jobs", "itemsets", "item_set", "item_chunks", "item_lists", "item_state",
			"outbox", "outbox_topics", "limit_rates", "limit_slots"} {
			db.Exec("DROP TABLE IF EXISTS `" + prefix + n + "`")
		}
	})
	gdb, err := gorm.Open(mysql.New(mysql.Config{Conn: db}), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := gdb.Table(table).AutoMigrate(&Payout{}); err != nil {
		t.Fatal(err)
	}
	l, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	day := "2026-12-05"
	key := idem.Key{Job: "payouts", Period: day}
	rows := []Payout{{Day: day, Account: "acme", AmountCents: 12000}, {Day: day, Account: "globex", AmountCents: 4500}}
	count := func() int64 {
		var n int64
		if err := gdb.Table(table).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	boom := errors.New("the bank said no")
	err = l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		if err := gormOn(ctx, gdb, tx).Table(table).Create(&rows).Error; err != nil {
			return err
		}
		return boom // after the rows: they must roll back
	}, idem.OneAttempt())
	if !errors.Is(err, boom) {
		t.Fatalf("failing RunTx: %v", err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows after a failed attempt; want 0", n)
	}
	if rec, _, _ := l.Lookup(ctx, key); rec.Status == idem.StatusDone {
		t.Fatal("done after a failed attempt")
	}
	// The failed day backs off; an operator makes it runnable at once.
	if err := l.Resolve(ctx, key, idem.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	var res idem.Result
	err = l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		return gormOn(ctx, gdb, tx).Table(table).Create(&rows).Error
	}, idem.ReportTo(&res))
	if err != nil || res.Outcome != idem.Ran {
		t.Fatalf("RunTx: %v (%s)", err, res.Outcome)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d rows; want 2", n)
	}
	ran := false
	err = l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error { ran = true; return nil }, idem.ReportTo(&res))
	if err != nil || ran || res.Outcome != idem.AlreadyDone {
		t.Fatalf("RunTx of a done day: %v, ran %v, %s", err, ran, res.Outcome)
	}
	if rec, ok, err := l.Lookup(ctx, key); err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Fatalf("record %+v %v %v; want done by attempt 2", rec, ok, err)
	}
}
