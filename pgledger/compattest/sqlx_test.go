package compattest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jmoiron/sqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// sqlxLedger is a DBLedger with the sqlx and GORM handles of the same
// *sql.DB, as a service on sqlx or GORM has them.
type sqlxLedger struct {
	l   *pgledger.DBLedger
	dbx *sqlx.DB
	gdb *gorm.DB
}

// openSqlxLedger opens the ledger in schema through driver, with sqlx and
// GORM on its *sql.DB.
func openSqlxLedger(ctx context.Context, driver, schema string) (sqlxLedger, error) {
	dbx, err := sqlx.Open(driver, os.Getenv(dsnEnv))
	if err != nil {
		return sqlxLedger{}, err
	}
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: dbx.DB}), &gorm.Config{})
	if err != nil {
		dbx.Close()
		return sqlxLedger{}, err
	}
	l, err := pgledger.NewDB(ctx, dbx.DB, pgledger.WithSchema(schema))
	if err != nil {
		dbx.Close()
		return sqlxLedger{}, err
	}
	return sqlxLedger{l, dbx, gdb}, nil
}

// pay is the business write of the payouts job for key, through sqlx on
// tx: a plain INSERT, so that a second commit shows as a second row.
func (s sqlxLedger) pay(ctx context.Context, tx *sql.Tx, key idem.Key) error {
	return insertPayout(ctx, s.dbx, tx, table(s.l, "payouts"), payout{Day: key.Period, Account: "acme", AmountCents: 12000})
}

// payGorm is pay through GORM on tx.
func (s sqlxLedger) payGorm(ctx context.Context, tx *sql.Tx, key idem.Key) error {
	return gormOn(ctx, s.gdb, tx).Table(table(s.l, "payouts")).Create(&payout{Day: key.Period, Account: "acme", AmountCents: 12000}).Error
}

// createPayouts creates the business table in l's schema.
func createPayouts(t *testing.T, l *pgledger.DBLedger) {
	t.Helper()
	if err := execIn(context.Background(), l, `CREATE TABLE `+table(l, "payouts")+
		` (day text NOT NULL, account text NOT NULL, amount_cents bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// payouts counts the committed payout rows of day.
func payouts(t *testing.T, l *pgledger.DBLedger, day string) int {
	t.Helper()
	var n int
	if err := l.DB().QueryRow(`SELECT count(*) FROM `+table(l, "payouts")+` WHERE day = $1`, day).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// payConcurrently triggers key's RunTx 16 times at once, through the
// ledgers in turn, each paying with pay (after holding its transaction a
// little, so that the triggers overlap).
func payConcurrently(t *testing.T, ls []sqlxLedger, key idem.Key, pay func(s sqlxLedger, ctx context.Context, tx *sql.Tx, key idem.Key) error) map[idem.Outcome]int {
	t.Helper()
	byLedger := map[*pgledger.DBLedger]sqlxLedger{}
	var dls []*pgledger.DBLedger
	for _, s := range ls {
		byLedger[s.l] = s
		dls = append(dls, s.l)
	}
	return runTxConcurrently(t, dls, key, func(ctx context.Context, l *pgledger.DBLedger, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_sleep(0.05)`); err != nil {
			return err
		}
		return pay(byLedger[l], ctx, tx, key)
	})
}

// openSqlxPair opens the test's ledger twice on one fresh schema: through
// pgx's stdlib driver and through lib/pq, each with a *sql.DB of its own
// (two hosts, as far as the database can tell).
func openSqlxPair(t *testing.T) []sqlxLedger {
	t.Helper()
	first := openDBLedger(t, openDB(t, "pgx"))
	createPayouts(t, first)
	var ls []sqlxLedger
	for _, driver := range sqlDrivers {
		s, err := openSqlxLedger(context.Background(), driver, first.Schema())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.dbx.Close() })
		ls = append(ls, s)
	}
	return ls
}

// TestDBRunTxSqlxConcurrent: 16 triggers of one key at once, through two
// DBLedgers (pgx's stdlib driver and lib/pq), each writing its payout row
// through sqlx on RunTx's *sql.Tx: the row commits exactly once, with the
// done mark, and one caller ran it. The same with GORM.
func TestDBRunTxSqlxConcurrent(t *testing.T) {
	t.Parallel()
	testDSN(t)
	ls := openSqlxPair(t)
	for _, w := range []struct {
		job string
		pay func(s sqlxLedger, ctx context.Context, tx *sql.Tx, key idem.Key) error
	}{{"payouts-sqlx", sqlxLedger.pay}, {"payouts-gorm", sqlxLedger.payGorm}} {
		k := idem.Key{Job: w.job, Period: "2026-10-27"}
		outcomes := payConcurrently(t, ls, k, w.pay)
		if n := payouts(t, ls[0].l, k.Period); n != 1 || outcomes[idem.Ran] != 1 {
			t.Fatalf("%s: payout committed %d times, outcomes %v; want once, one Ran", w.job, n, outcomes)
		}
		rec, ok, err := ls[1].l.Lookup(context.Background(), k)
		if err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 1 {
			t.Fatalf("%s: record %+v, %v, %v; want done by attempt 1", w.job, rec, ok, err)
		}
		if _, err := ls[0].l.DB().Exec(`DELETE FROM ` + table(ls[0].l, "payouts")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDBRunTxSqlxKilled SIGKILLs a child process (this test binary,
// re-executed, on a *sql.DB of its own, with each driver) inside RunTx's
// transaction, after its payout was written through sqlx and before the
// commit: the server rolls both back, so nothing is committed. Past the
// dead attempt's lease, 16 triggers at once through both drivers commit the
// payout exactly once, with the done mark.
func TestDBRunTxSqlxKilled(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		k := idem.Key{Job: "payouts", Period: "2026-10-27"}
		if idemtest.IsChild(t) {
			idemtest.Start(t, "", func(schema string) { // does not return
				ctx := context.Background()
				s, err := openSqlxLedger(ctx, driver, schema)
				if err != nil {
					fmt.Println(err)
					os.Exit(3)
				}
				err = s.l.RunTx(idemtest.KillAt(ctx, idemtest.AfterFn), k, func(ctx context.Context, tx *sql.Tx) error {
					return s.pay(ctx, tx, k)
				})
				fmt.Println("not killed:", err)
				os.Exit(3)
			})
		}
		ls := openSqlxPair(t)
		l := ls[0].l
		exit := idemtest.Fork(t, l.Schema(), nil)
		if !exit.Killed {
			t.Fatalf("child not killed: %+v", exit)
		}
		if n := payouts(t, l, k.Period); n != 0 {
			t.Fatalf("after the kill inside the transaction: %d payouts committed, want 0", n)
		}
		rec, ok, err := l.Lookup(context.Background(), k)
		if err != nil || !ok || rec.Status != idem.StatusRunning || rec.Attempt != 1 {
			t.Fatalf("after the kill: record %+v, %v, %v; want running, attempt 1", rec, ok, err)
		}
		shift(t, l, idem.DefaultLease+idem.DefaultLease/10) // the dead child's lease
		outcomes := payConcurrently(t, ls, k, sqlxLedger.pay)
		if n := payouts(t, l, k.Period); n != 1 || outcomes[idem.Ran]+outcomes[idem.Recovered] != 1 {
			t.Fatalf("after the kill: payout committed %d times, outcomes %v; want once, one Ran or Recovered", n, outcomes)
		}
		rec, ok, err = l.Lookup(context.Background(), k)
		if err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 2 {
			t.Fatalf("record %+v, %v, %v; want done by attempt 2", rec, ok, err)
		}
	})
}

// TestDBRunTxRollsBackSqlxAndGorm: fn's writes through sqlx and GORM are
// on RunTx's transaction, not beside it: when fn fails after making them,
// none is committed, and neither is the done mark.
func TestDBRunTxRollsBackSqlxAndGorm(t *testing.T) {
	t.Parallel()
	testDSN(t)
	s := openSqlxPair(t)[1] // lib/pq
	k := idem.Key{Job: "payouts", Period: "2026-10-28"}
	failed := errors.New("fn fails after its writes")
	err := s.l.RunTx(context.Background(), k, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.pay(ctx, tx, k); err != nil {
			return err
		}
		if err := s.payGorm(ctx, tx, k); err != nil {
			return err
		}
		if n := payoutsIn(t, tx, s.l, k.Period); n != 2 {
			return fmt.Errorf("the transaction sees %d payouts, want 2", n)
		}
		return failed
	}, idem.OneAttempt())
	if !errors.Is(err, failed) {
		t.Fatalf("RunTx: %v, want fn's error", err)
	}
	if n := payouts(t, s.l, k.Period); n != 0 {
		t.Fatalf("%d payouts committed by a failed fn, want 0", n)
	}
	if rec, _, err := s.l.Lookup(context.Background(), k); err != nil || rec.Status == idem.StatusDone {
		t.Fatalf("record %+v, %v; want not done", rec, err)
	}
}

// payoutsIn counts day's payouts as tx sees them.
func payoutsIn(t *testing.T, tx *sql.Tx, l *pgledger.DBLedger, day string) int {
	t.Helper()
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM `+table(l, "payouts")+` WHERE day = $1`, day).Scan(&n); err != nil {
		t.Error(err)
	}
	return n
}
