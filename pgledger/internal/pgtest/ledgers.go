package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewPool returns a pool on the test database, closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// UniqueName returns prefix followed by a random part.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// DropSchemaLater drops schema (and everything in it) when t ends.
func DropSchemaLater(t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
}

// OpenLedger attaches a ledger in a fresh schema of its own to pool; the
// schema is dropped when t ends.
func OpenLedger(t testing.TB, pool *pgxpool.Pool, opts ...pgledger.Option) *pgledger.Ledger {
	t.Helper()
	schema := UniqueName("idemtest_")
	DropSchemaLater(t, pool, schema)
	l, err := pgledger.New(context.Background(), pool, append([]pgledger.Option{pgledger.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// SchemaLedger is either kind of ledger (*pgledger.Ledger on a pgx pool,
// *pgledger.DBLedger on a *sql.DB), for the helpers that work on both.
type SchemaLedger interface{ Schema() string }

// ExecIn runs a statement on l's own connection.
func ExecIn(ctx context.Context, l SchemaLedger, q string, args ...any) error {
	switch l := l.(type) {
	case *pgledger.Ledger:
		_, err := l.Pool().Exec(ctx, q, args...)
		return err
	case *pgledger.DBLedger:
		_, err := l.DB().ExecContext(ctx, q, args...)
		return err
	}
	return fmt.Errorf("ExecIn: %T is not a ledger", l)
}

// QueryIn runs a query on l's own connection, scans each row into dest
// and calls each.
func QueryIn(ctx context.Context, l SchemaLedger, q string, dest []any, each func()) error {
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
	return fmt.Errorf("QueryIn: %T is not a ledger", l)
}

// OpenDB opens the test database through driver, closed when t ends.
func OpenDB(t testing.TB, driver string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// OpenDBLedger attaches a ledger in a fresh schema of its own to db; the
// schema is dropped when t ends.
func OpenDBLedger(t testing.TB, db *sql.DB, opts ...pgledger.Option) *pgledger.DBLedger {
	t.Helper()
	schema := UniqueName("idemtest_")
	DropSchemaLater(t, NewPool(t), schema)
	l, err := pgledger.NewDB(context.Background(), db, append([]pgledger.Option{pgledger.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Table names a table in l's schema.
func Table(l SchemaLedger, name string) string {
	return pgx.Identifier{l.Schema(), name}.Sanitize()
}
