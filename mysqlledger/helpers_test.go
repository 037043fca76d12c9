package mysqlledger_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/mysqlledger"
)

// dsnEnv names the variable that names the real MySQL or MariaDB the tests
// run against; scripts/test.sh starts a throwaway MariaDB
// (scripts/mysql.sh) and sets it.
const dsnEnv = "IDEM_TEST_MYSQL_DSN"

// testDSN returns the test database's DSN. Without one the test is
// skipped, except in CI, where the MySQL tests must run.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatalf("%s is not set, and CI must run the MySQL tests: run scripts/test.sh (it starts MariaDB with scripts/mysql.sh)", dsnEnv)
		}
		t.Skipf("no MySQL: run scripts/test.sh (it starts a throwaway MariaDB), or set %s=user@tcp(host:port)/db", dsnEnv)
	}
	return dsn
}

// openDB opens the test database, closed when t ends.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openDBWith opens the test database with its DSN changed by edit,
// closed when t ends.
func openDBWith(t testing.TB, edit func(c *mysql.Config)) *sql.DB {
	t.Helper()
	c, err := mysql.ParseDSN(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	edit(c)
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// queryCounts runs query, whose rows are a name and a number, and returns
// them as a map.
func queryCounts(t testing.TB, db interface {
	Query(query string, args ...any) (*sql.Rows, error)
}, query string, args ...any) map[string]int {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		got[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// statementKinds are the statement counters of the server's SHOW SESSION
// STATUS that the statement-counting tests read.
var statementKinds = []string{"Com_select", "Com_insert", "Com_insert_select", "Com_update", "Com_delete", "Com_begin", "Com_commit", "Com_rollback"}

// openCountedLedger returns a ledger on a pool of one connection, whose
// statements go as text (counted by kind), and a function that runs fn
// and returns the statements the server counted on that connection
// meanwhile, by kind (only the kinds it ran).
func openCountedLedger(t *testing.T) (*mysqlledger.Ledger, func(fn func()) map[string]int) {
	t.Helper()
	db := openDBWith(t, func(c *mysql.Config) { c.InterpolateParams = true })
	db.SetMaxOpenConns(1)
	l := openLedger(t, db)
	count := func() map[string]int {
		t.Helper()
		return queryCounts(t, db, `SHOW SESSION STATUS WHERE Variable_name IN ('`+strings.Join(statementKinds, "','")+`')`)
	}
	return l, func(fn func()) map[string]int {
		t.Helper()
		before := count()
		fn()
		after := count()
		d := map[string]int{}
		for _, k := range statementKinds {
			if v := after[k] - before[k]; v != 0 {
				d[k] = v
			}
		}
		return d
	}
}

func uniqueName(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:]) + "_"
}

// ledgerTables are the names of a ledger's tables, without the prefix.
var ledgerTables = []string{"meta", "runs", "jobs", "itemsets", "item_set", "item_chunks", "item_lists", "item_state",
	"outbox", "outbox_topics", "limit_rates", "limit_slots", "model_effects", "reruns", "wakes"}

// dropLater drops the tables of prefix when t ends.
func dropLater(t testing.TB, prefix string) {
	t.Cleanup(func() {
		db, err := sql.Open("mysql", testDSN(t))
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		var names []string
		for _, n := range ledgerTables {
			names = append(names, "`"+prefix+n+"`")
		}
		if _, err := db.Exec(`DROP TABLE IF EXISTS ` + strings.Join(names, ", ")); err != nil {
			t.Errorf("drop the tables of %s: %v", prefix, err)
		}
	})
}

// openLedger attaches a ledger with a fresh prefix to db; its tables are
// dropped when t ends.
func openLedger(t testing.TB, db *sql.DB, opts ...mysqlledger.Option) *mysqlledger.Ledger {
	t.Helper()
	prefix := uniqueName("t")
	dropLater(t, prefix)
	l, err := mysqlledger.New(context.Background(), db, append([]mysqlledger.Option{mysqlledger.WithTablePrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// harness opens ledgers, each on a *sql.DB of its own, for idemtest's
// conformance kit.
func harness() idemtest.Harness {
	return idemtest.Harness{
		Open: func(t *testing.T, clk idem.Clock) idem.Store {
			return openLedger(t, openDB(t), mysqlledger.WithRunOptions(idem.WithClock(clk)))
		},
		LeaseExpiry: true,
		Items:       true,
		Shift:       kitShift,
	}
}

// shiftTimes makes d pass for l: the server's clock cannot be faked, so
// every time the ledger stored on it moves back by d. It gives up waiting
// for a row lock after a second (innodb_lock_wait_timeout) and tries
// again, so a wait cycle with a ledger's transaction ends in the shift.
func shiftTimes(l *mysqlledger.Ledger, d time.Duration) error {
	us := d.Microseconds()
	stmts := []string{
		fmt.Sprintf(`UPDATE %s SET lease_until = IF(lease_until = 0, 0, lease_until - %[2]d), not_before = IF(not_before = 0, 0, not_before - %[2]d),
			created = created - %[2]d, updated = updated - %[2]d`, l.Table("runs"), us),
		fmt.Sprintf(`UPDATE %s SET lease_until = IF(lease_until = 0, 0, lease_until - %[2]d)`, l.Table("item_chunks"), us),
		fmt.Sprintf(`UPDATE %s SET lease_until = IF(lease_until = 0, 0, lease_until - %[2]d), not_before = IF(not_before = 0, 0, not_before - %[2]d)`,
			l.Table("item_state"), us),
	}
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for tries := 1; ; tries++ {
		err := func() error {
			c, err := l.DB().Conn(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			tx, err := c.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.Exec(`SET SESSION innodb_lock_wait_timeout = 1`); err != nil {
				return err
			}
			for _, q := range stmts {
				if _, err := tx.Exec(q); err != nil {
					return err
				}
			}
			return tx.Commit()
		}()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || (me.Number != 1205 && me.Number != 1213) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shift by %v: still waiting for the ledger's row locks after %d tries: %w", d, tries, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func kitShift(t *testing.T, s idem.Store, d time.Duration) {
	if err := shiftTimes(s.(*mysqlledger.Ledger), d); err != nil {
		t.Errorf("shift: %v", err) // maybe not on the test's goroutine: no Fatal
	}
}

// modelTx is idemtest.TestModel's TxHarness: its RunTx and CatchUpTx jobs
// write to the table model_effects beside the ledger's.
func modelTx() *idemtest.TxHarness {
	write := func(ctx context.Context, l *mysqlledger.Ledger, tx *sql.Tx, key idem.Key) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+l.Table("model_effects")+` (job, period, n) VALUES (?, ?, 1)
			ON DUPLICATE KEY UPDATE n = n + 1`, key.Job, key.Period)
		return err
	}
	return &idemtest.TxHarness{
		Setup: func(ctx context.Context, s idem.Store) error {
			l := s.(*mysqlledger.Ledger)
			_, err := l.DB().ExecContext(ctx, `CREATE TABLE `+l.Table("model_effects")+
				` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL, n INT NOT NULL, PRIMARY KEY (job, period))`)
			return err
		},
		Run: func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
			l := s.(*mysqlledger.Ledger)
			return l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
				if err := write(ctx, l, tx, key); err != nil {
					return err
				}
				return fn(ctx)
			}, opts...)
		},
		CatchUp: func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.Option) (idem.CatchUpResult, error) {
			l := s.(*mysqlledger.Ledger)
			return idem.CatchUpTx(ctx, l, job, sched, func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
				if err := write(ctx, l, tx, idem.Key{Job: job, Period: p.Name}); err != nil {
					return err
				}
				return fn(ctx, p)
			}, opts...)
		},
		Rows: func(ctx context.Context, s idem.Store) (map[idem.Key]int, error) {
			l := s.(*mysqlledger.Ledger)
			rows, err := l.DB().QueryContext(ctx, `SELECT job, period, n FROM `+l.Table("model_effects"))
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[idem.Key]int{}
			for rows.Next() {
				var k idem.Key
				var n int
				if err := rows.Scan(&k.Job, &k.Period, &n); err != nil {
					return nil, err
				}
				out[k] = n
			}
			return out, rows.Err()
		},
	}
}
