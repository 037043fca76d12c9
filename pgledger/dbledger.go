package pgledger

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// DBLedger is the ledger of [Ledger] on a *sql.DB instead of a pgx pool,
// for services that reach PostgreSQL through database/sql (with pgx's
// stdlib driver or lib/pq underneath, and sqlx, GORM, ent or sqlc on top):
// the same schema, statements and protocol (leases on the database's clock,
// SKIP LOCKED claims, catch-up, prune, fan-out), and the same promises,
// except that [DBLedger.RunTx], [idem.CatchUpTx] and [idem.EachTx] hand
// fn a *sql.Tx. A DBLedger and a Ledger on the same schema are one ledger.
//
// It implements [idemstore.Store], [idemstore.TxStore] (with *sql.Tx),
// [idemstore.CatchUpStore], [idemstore.Lister], [idemstore.ItemStore] and
// [idemstore.ItemTxStore] (with *sql.Tx), [idemstore.LimitStore],
// [idemstore.Rerunner] (idem.Rerun) and [idemstore.Historian] (idem show).
//
// What it does not do as a pool does: database/sql has no batches, so
// the statements that the pgx pool sends in one round trip (AddItems, a
// new key's claim, a window of single items' ends) are sent one after the
// other, in one transaction. A DBLedger is safe for concurrent use.
type DBLedger struct {
	core
	sdb *sql.DB
}

var (
	_ idemstore.CatchUpTxStore[*sql.Tx] = (*DBLedger)(nil)
	_ idemstore.ItemTxStore[*sql.Tx]    = (*DBLedger)(nil)
	_ idemstore.Lister                  = (*DBLedger)(nil)
	_ idemstore.Rerunner                = (*DBLedger)(nil)
	_ idemstore.Historian               = (*DBLedger)(nil)
)

// NewDB attaches a ledger to the caller's *sql.DB (opened with a
// PostgreSQL driver: pgx's stdlib "pgx" or lib/pq's "postgres"), creating
// its schema and tables if needed, as [New] does on a pool. Business tables
// in the same database then commit with the ledger's done marks
// ([DBLedger.RunTx]). The ledger never closes db.
//
// It refuses, without writing anything, a schema two or more versions newer
// than [SchemaVersion] ([idem.ErrNewerSchema]), and a connection whose search_path
// names the schema ([ErrSchemaOnSearchPath]), and a server that runs with
// fsync off ([ErrWeakDurability]), as New does.
//
// database/sql keeps at most two idle connections unless told otherwise
// (db.SetMaxIdleConns): a service that makes more calls at once (the
// workers of [idem.Each], the Scheduler's jobs, a relay) closes each
// connection past the second as it goes idle, and opens a new one (a new
// server process on PostgreSQL) for a later call. Set it to the calls you
// make at once.
// Measured here (idemtest.TestSharedLimits's rate test on pgx's stdlib,
// 1,200 items in three processes of 8 workers at a shared 200 a second,
// no race detector): 181 connections opened and 105 items a second with
// the default, 26 and 186 a second with SetMaxIdleConns(16).
func NewDB(ctx context.Context, db *sql.DB, opts ...Option) (*DBLedger, error) {
	if db == nil {
		return nil, errors.New("pgledger: NewDB with a nil *sql.DB")
	}
	c, err := newCore(ctx, sqlDB{db}, opts)
	if err != nil {
		return nil, err
	}
	return &DBLedger{core: c, sdb: db}, nil
}

// DB returns the ledger's *sql.DB, for business tables that live beside it.
func (l *DBLedger) DB() *sql.DB { return l.sdb }

// String describes the ledger for logs.
func (l *DBLedger) String() string {
	return "pgledger.DBLedger(schema " + strconv.Quote(l.schema) + ")"
}

// Run runs fn for key on this ledger: see [idem.RunOn].
func (l *DBLedger) Run(ctx context.Context, key idemstore.Key, fn func(context.Context) error, opts ...idem.Option) error {
	return idem.RunOn(ctx, l, key, fn, opts...)
}

// RunTx runs fn in a transaction on the ledger's *sql.DB and commits its
// writes together with the key's done mark: both or neither, so the
// business effect in this database happens exactly once, whatever kills
// the process. See [Ledger.RunTx] for what fn must do; here its writes go
// through tx (sqlx, GORM and ent each have a way to work on a *sql.Tx).
func (l *DBLedger) RunTx(ctx context.Context, key idemstore.Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, l, key, fn, opts...)
}

// FinishTx implements [idemstore.TxStore] with *sql.Tx, as
// [Ledger.FinishTx] does with pgx.Tx.
func (l *DBLedger) FinishTx(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) ([]byte, error)) error {
	return l.finishTx(ctx, key, attempt, cursor, func(t tx) ([]byte, error) { return fn(t.(sqlTx).tx) })
}

// FinishItemsTx implements [idemstore.ItemTxStore] with *sql.Tx, as
// [Ledger.FinishItemsTx] does with pgx.Tx (the single items' fences are
// sent one after the other).
func (l *DBLedger) FinishItemsTx(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim, fn func(tx *sql.Tx, c idemstore.ItemClaim) error, failed func(c idemstore.ItemClaim, err error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
	return finishItemsTx(ctx, &l.core, key, step, claims, func(t tx) *sql.Tx { return t.(sqlTx).tx }, fn, failed)
}
