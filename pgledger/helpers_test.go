package pgledger_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The tests run against a real PostgreSQL named by this variable;
// scripts/test.sh starts a throwaway one (scripts/pg.sh) and sets it.
const dsnEnv = "IDEM_TEST_PG_DSN"

// testDSN returns the test database's DSN. Without one the test is skipped,
// except in CI, where the Postgres tests must run.
func testDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if inCI() {
			t.Fatalf("%s is not set, and CI must run the Postgres tests: run scripts/test.sh (it starts PostgreSQL with scripts/pg.sh)", dsnEnv)
		}
		t.Skipf("no PostgreSQL: run scripts/test.sh (it starts a throwaway server), or set %s=postgres://...", dsnEnv)
	}
	return dsn
}

func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// newPool returns a pool on the test database, closed when t ends.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// uniqueName returns prefix followed by a random part.
func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// dropSchemaLater drops schema (and everything in it) when t ends.
func dropSchemaLater(t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
}

// openLedger attaches a ledger in a fresh schema of its own to pool; the
// schema is dropped when t ends.
func openLedger(t testing.TB, pool *pgxpool.Pool, opts ...pgledger.Option) *pgledger.Ledger {
	t.Helper()
	schema := uniqueName("idemtest_")
	dropSchemaLater(t, pool, schema)
	l, err := pgledger.New(context.Background(), pool, append([]pgledger.Option{pgledger.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// schemaLedger is either kind of ledger (*pgledger.Ledger on a pgx pool,
// *pgledger.DBLedger on a *sql.DB), for the helpers that work on both.
type schemaLedger interface{ Schema() string }

// execIn runs a statement on l's own connection.
func execIn(ctx context.Context, l schemaLedger, q string, args ...any) error {
	switch l := l.(type) {
	case *pgledger.Ledger:
		_, err := l.Pool().Exec(ctx, q, args...)
		return err
	case *pgledger.DBLedger:
		_, err := l.DB().ExecContext(ctx, q, args...)
		return err
	}
	return fmt.Errorf("execIn: %T is not a ledger", l)
}

// queryIn runs a query on l's own connection, scans each row into dest
// and calls each.
func queryIn(ctx context.Context, l schemaLedger, q string, dest []any, each func()) error {
	switch l := l.(type) {
	case *pgledger.Ledger:
		rows, err := l.Pool().Query(ctx, q)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, dest, func() error { each(); return nil })
		return err
	case *pgledger.DBLedger:
		rows, err := l.DB().QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			each()
		}
		return rows.Err()
	}
	return fmt.Errorf("queryIn: %T is not a ledger", l)
}

// shift makes d pass for l: the database's clock cannot be faked, so every
// time l's schema stored moves back by d.
func shift(t testing.TB, l schemaLedger, d time.Duration) {
	t.Helper()
	if err := shiftTimes(l, d); err != nil {
		t.Fatalf("shift: %v", err)
	}
}

// shiftTimes moves back every time of l's schema by d in one round trip
// and one transaction (statements without arguments, sent together), whose
// commit does not wait for its WAL flush: the model test shifts around most
// of its operations, and no test crashes the server.
//
// The shift locks every row while the ledger's own transactions may hold
// some (a window's item ends, locked in the window's order) and wait for
// others: it gives up after waiting 50 ms for a lock (lock_timeout, far
// below the server's deadlock_timeout of 1 s), so a wait cycle with a
// ledger's transaction ends in the shift, never in the ledger's, and is
// tried again, for a minute at most.
func shiftTimes(l schemaLedger, d time.Duration) error {
	by := fmt.Sprintf("(%d * interval '1 microsecond')", d.Microseconds())
	q := `SELECT set_config('synchronous_commit', 'off', true), set_config('lock_timeout', '50ms', true);
	UPDATE ` + table(l, "runs") + ` SET lease_until = lease_until - ` + by + `,
		not_before = not_before - ` + by + `, created = created - ` + by + `, updated = updated - ` + by + `;
	UPDATE ` + table(l, "item_chunks") + ` SET lease_until = lease_until - ` + by + `;
	UPDATE ` + table(l, "item_state") + ` SET lease_until = lease_until - ` + by + `, not_before = not_before - ` + by + `;
	UPDATE ` + table(l, "outbox") + fmt.Sprintf(` SET lease_until = CASE WHEN lease_until > 0 THEN lease_until - %[1]d ELSE 0 END,
		not_before = CASE WHEN not_before > 0 THEN not_before - %[1]d ELSE 0 END WHERE lease_until > 0 OR not_before > 0`, d.Microseconds())
	deadline := time.Now().Add(time.Minute)
	for tries := 1; ; tries++ {
		err := execIn(context.Background(), l, q)
		var pe interface{ SQLState() string } // pgconn's and lib/pq's errors alike
		if !errors.As(err, &pe) || (pe.SQLState() != "55P03" && pe.SQLState() != "40P01") {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shift by %v: still waiting for the ledger's row locks after %d tries: %w", d, tries, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// table names a table in l's schema.
func table(l schemaLedger, name string) string {
	return pgx.Identifier{l.Schema(), name}.Sanitize()
}

// runTxConcurrently runs key's RunTx 16 times at once, through the ledgers
// in turn, with fn as the attempt, and returns the callers' outcomes; only
// nil or ErrInProgress may reach a caller.
func runTxConcurrently[L txLedger[T], T any](t *testing.T, ls []L, key idem.Key, fn func(ctx context.Context, l L, tx T) error) map[idem.Outcome]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	for i := range 16 {
		l := ls[i%len(ls)]
		wg.Go(func() {
			var res idem.Result
			err := l.RunTx(context.Background(), key, func(ctx context.Context, tx T) error {
				return fn(ctx, l, tx)
			}, idem.ReportTo(&res))
			if err != nil && !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("RunTx: %v (only nil or ErrInProgress may reach a caller)", err)
			}
			mu.Lock()
			outcomes[res.Outcome]++
			mu.Unlock()
		})
	}
	testwait.Group(t, &wg, "16 concurrent RunTx of %s", key)
	return outcomes
}

// eachDriver runs test as a parallel subtest for each database/sql driver.
func eachDriver(t *testing.T, test func(t *testing.T, driver string)) {
	testDSN(t)
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, driver)
		})
	}
}
