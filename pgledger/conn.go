package pgledger

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The ledger's SQL and protocol are written once, against conn, db and tx:
// a pgx pool ([New], [Open]) and a *sql.DB ([NewDB]) are two thin adapters
// of them (pgxDB and sqlDB). Rows that match nothing are reported with an
// error matching sql.ErrNoRows (pgx.ErrNoRows matches it too).

// conn is where statements run: a pool or *sql.DB (each statement in a
// transaction of its own), or a transaction.
type conn interface {
	// exec runs a statement and returns how many rows it changed. A
	// statement without arguments may hold several statements (the DDL).
	exec(ctx context.Context, query string, args ...any) (int64, error)
	// queryRow runs a statement that returns one row and scans it into
	// dest: a *[]string receives a text[] column.
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
	// query runs a statement and calls each with a scan of every row.
	query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error
	// batch runs the statements in order and returns the rows each changed,
	// all or nothing: in one transaction (on a pool or *sql.DB, one of its
	// own). The pgx adapter sends them in one round trip.
	batch(ctx context.Context, stmts []stmt) ([]int64, error)
	// batchRow runs the statements pre, then query, which returns one row
	// scanned into dest as queryRow does, all or nothing as batch does (a
	// query that matches no row is no failure of the statements before
	// it). The pgx adapter sends them in one round trip.
	batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error
}

// stmt is a statement of a batch.
type stmt struct {
	query string
	args  []any
}

// db is a pool or *sql.DB: a conn that begins transactions, and holds one
// of its connections for a caller (pin).
type db interface {
	conn
	beginner
	pin(ctx context.Context) (pinned, error)
}

// beginner begins transactions: a db, or a pinned connection of a
// *sql.DB.
type beginner interface {
	begin(ctx context.Context) (tx, error)
}

// pinned is one connection of a pool or *sql.DB, held until release: its
// statements share one session (and its session-level advisory locks),
// each in a transaction of its own, as on the pool. release gives the
// connection back to the pool, or, when destroy, closes it (which ends the
// session and everything it holds).
type pinned interface {
	conn
	release(destroy bool)
}

// tx is a transaction. rollback after commit does nothing.
type tx interface {
	conn
	commit(ctx context.Context) error
	rollback(ctx context.Context)
}

// inTx runs fn in a transaction of d and commits it if fn returns nil.
func inTx(ctx context.Context, d beginner, fn func(t tx) error) error {
	t, err := d.begin(ctx)
	if err != nil {
		return err
	}
	defer t.rollback(context.WithoutCancel(ctx))
	if err := fn(t); err != nil {
		return err
	}
	return t.commit(ctx)
}

// pgxQuerier is what a pgx pool and a pgx.Tx both have.
type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pgxDB is the adapter of a pgx pool.
type pgxDB struct{ pool *pgxpool.Pool }

// queryRowGeneric is c's queryRow, run with the statement's generic plan
// (plan_cache_mode, as syncOffGenericSQL sets it) where that costs no
// round trip: on a pgx pool, the setting and the query in one batch. On a
// *sql.DB, where a batch is a transaction of several round trips, it is
// queryRow.
func queryRowGeneric(ctx context.Context, c conn, query string, args []any, dest ...any) error {
	if _, ok := c.(pgxDB); ok {
		return c.batchRow(ctx, []stmt{{query: genericPlanSQL}}, query, args, dest...)
	}
	return c.queryRow(ctx, query, args, dest...)
}

// pgxTx is the adapter of a pgx transaction.
type pgxTx struct{ tx pgx.Tx }

func (d pgxDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (d pgxDB) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return d.pool.QueryRow(ctx, query, args...).Scan(dest...)
}

func (t pgxTx) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRow(ctx, query, args...).Scan(dest...)
}

func (d pgxDB) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return pgxQuery(ctx, d.pool, query, args, each)
}

func (t pgxTx) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return pgxQuery(ctx, t.tx, query, args, each)
}

func pgxQuery(ctx context.Context, q pgxQuerier, query string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// batch sends the statements in one round trip; sent through the pool,
// PostgreSQL runs them as one implicit transaction.
func (d pgxDB) batch(ctx context.Context, stmts []stmt) ([]int64, error) {
	return pgxBatch(ctx, d.pool, stmts)
}

func (t pgxTx) batch(ctx context.Context, stmts []stmt) ([]int64, error) {
	return pgxBatch(ctx, t.tx, stmts)
}

func pgxBatch(ctx context.Context, q pgxQuerier, stmts []stmt) ([]int64, error) {
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.query, s.args...)
	}
	br := q.SendBatch(ctx, b)
	n := make([]int64, len(stmts))
	for i := range stmts {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return nil, err
		}
		n[i] = tag.RowsAffected()
	}
	// Sent through the pool, the batch commits here.
	if err := br.Close(); err != nil {
		return nil, err
	}
	return n, nil
}

func (d pgxDB) batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error {
	return pgxBatchRow(ctx, d.pool, pre, query, args, dest)
}

func (t pgxTx) batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error {
	return pgxBatchRow(ctx, t.tx, pre, query, args, dest)
}

func pgxBatchRow(ctx context.Context, q pgxQuerier, pre []stmt, query string, args, dest []any) error {
	b := &pgx.Batch{}
	for _, s := range pre {
		b.Queue(s.query, s.args...)
	}
	b.Queue(query, args...)
	br := q.SendBatch(ctx, b)
	for range pre {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
	}
	err := br.QueryRow().Scan(dest...)
	if cerr := br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		return cerr // sent through the pool, the batch commits here
	}
	return err
}

func (d pgxDB) begin(ctx context.Context) (tx, error) {
	t, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTx{t}, nil
}

func (d pgxDB) pin(ctx context.Context) (pinned, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pgxConn{c}, nil
}

// pgxConn is the adapter of one connection of a pgx pool (db.pin).
type pgxConn struct{ c *pgxpool.Conn }

func (c pgxConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.c.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (c pgxConn) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return c.c.QueryRow(ctx, query, args...).Scan(dest...)
}

func (c pgxConn) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return pgxQuery(ctx, c.c, query, args, each)
}

func (c pgxConn) batch(ctx context.Context, stmts []stmt) ([]int64, error) {
	return pgxBatch(ctx, c.c, stmts)
}

func (c pgxConn) batchRow(ctx context.Context, pre []stmt, query string, args []any, dest ...any) error {
	return pgxBatchRow(ctx, c.c, pre, query, args, dest)
}

func (c pgxConn) release(destroy bool) {
	if destroy {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		_ = c.c.Conn().Close(ctx) // the pool then drops it
		cancel()
	}
	c.c.Release()
}

// closeWait bounds the goodbye a connection closed on purpose sends its
// server: it is closed either way.
const closeWait = time.Second

func (t pgxTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }
func (t pgxTx) rollback(ctx context.Context)     { _ = t.tx.Rollback(ctx) }
