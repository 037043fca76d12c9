package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// wconn is a connection kept for the ledger's write transactions, with
// BEGIN IMMEDIATE and COMMIT run as statements and its statements prepared
// once. (A database/sql Tx starts a goroutine per transaction to watch its
// context; a Run would pay two.)
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func (w *wconn) prep(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := w.stmts[q]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	w.stmts[q] = st
	return st, nil
}

// exec runs q, prepared once (BEGIN and COMMIT too: compiling them costs
// more than running them).
func (w *wconn) exec(ctx context.Context, q string) (sql.Result, error) {
	st, err := w.prep(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx)
}

func (w *wconn) close() error {
	for _, st := range w.stmts {
		st.Close()
	}
	return w.conn.Close()
}

type stmtKey struct {
	pool *sql.DB
	q    string
}

// prep returns q prepared on pool, preparing it once.
func (l *Ledger) prep(ctx context.Context, pool *sql.DB, q string) (*sql.Stmt, error) {
	k := stmtKey{pool, q}
	if st, ok := l.stmts.Load(k); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := pool.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if prev, loaded := l.stmts.LoadOrStore(k, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// queryRow runs a prepared read on the FULL pool.
func (l *Ledger) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := l.prep(ctx, l.db, q)
	if err != nil {
		return l.db.QueryRowContext(ctx, q, args...) // reports err through Scan
	}
	return st.QueryRowContext(ctx, args...)
}

// execer is what runs a write transaction's statements: a *sql.Tx, or a
// kept connection inside BEGIN IMMEDIATE ... COMMIT.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// wtx is a write transaction of the ledger, whose statements are prepared
// once per pool (or per kept connection).
type wtx struct {
	execer
	Tx   *sql.Tx // nil on a kept connection (withTx); set by withSQLTx
	wc   *wconn
	ctx  context.Context
	l    *Ledger
	pool *sql.DB
}

func (t *wtx) stmt(q string) (*sql.Stmt, error) {
	if t.wc != nil {
		return t.wc.prep(t.ctx, q)
	}
	st, err := t.l.prep(t.ctx, t.pool, q)
	if err != nil {
		return nil, err
	}
	return t.Tx.StmtContext(t.ctx, st), nil
}

func (t *wtx) exec(q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(t.ctx, args...)
}

func (t *wtx) queryRow(q string, args ...any) *sql.Row {
	st, err := t.stmt(q)
	if err != nil {
		return t.Tx.QueryRowContext(t.ctx, q, args...) // reports err through Scan
	}
	return st.QueryRowContext(t.ctx, args...)
}

// isBusy reports SQLITE_BUSY and SQLITE_LOCKED ("database is locked").
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}

// busyRetry runs f again while it fails with "database is locked", until
// ctx ends, so that lock contention never reaches a caller as an error.
func busyRetry(ctx context.Context, f func() error) error {
	wait := time.Millisecond
	for {
		err := f()
		if err == nil || !isBusy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (while: %w)", context.Cause(ctx), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// withTx runs f in a write transaction and commits it when f returns nil,
// one write at a time in this process, again while SQLite answers "database
// is locked". Without durable, the commit is not synced (the NORMAL pool, or
// PRAGMA synchronous=NORMAL on an attached database's connection, set back to
// FULL afterwards); with it, it is.
//
// Every transaction's first statement is a write, so it holds SQLite's write
// lock from its start whatever the database's _txlock: a deferred
// transaction that reads first and writes later fails with
// SQLITE_BUSY_SNAPSHOT, busy_timeout or not.
//
// An owned ledger runs it on a connection it keeps for writes (wconn); an
// attached one, and withSQLTx, in a database/sql Tx.
func (l *Ledger) withTx(ctx context.Context, durable bool, f func(*wtx) error) error {
	if l.fast == nil {
		return l.withSQLTx(ctx, durable, f)
	}
	if err := l.file.check(); err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	i, pool := 0, l.db
	if !durable {
		i, pool = 1, l.fast
	}
	return l.writeErr(busyRetry(ctx, func() error {
		w := l.wconns[i]
		if w == nil {
			c, err := pool.Conn(ctx)
			if err != nil {
				return err
			}
			w = &wconn{conn: c, stmts: map[string]*sql.Stmt{}}
			l.wconns[i] = w
		}
		if _, err := w.exec(ctx, `BEGIN IMMEDIATE`); err != nil {
			if !isBusy(err) { // a connection in an unknown state: take a new one next time
				w.close()
				l.wconns[i] = nil
			}
			return err
		}
		committed := false
		defer func() { // also when f panics
			if committed {
				return
			}
			if _, err := w.exec(context.WithoutCancel(ctx), `ROLLBACK`); err != nil {
				w.close()
				l.wconns[i] = nil
			}
		}()
		if err := f(&wtx{execer: w.conn, wc: w, ctx: ctx, l: l, pool: pool}); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `COMMIT`); err != nil {
			return err
		}
		committed = true
		return nil
	}))
}

// withSQLTx is withTx in a database/sql Tx, for transactions that hand the
// caller's fn a *sql.Tx (FinishTx, FinishItemsTx) and for attached
// databases.
func (l *Ledger) withSQLTx(ctx context.Context, durable bool, f func(*wtx) error) error {
	if err := l.file.check(); err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.writeErr(busyRetry(ctx, func() error {
		pool := l.db
		var tx *sql.Tx
		var err error
		if l.fast != nil {
			if !durable {
				pool = l.fast
			}
			tx, err = pool.BeginTx(ctx, nil)
		} else {
			var conn *sql.Conn
			if conn, err = l.db.Conn(ctx); err != nil {
				return err
			}
			defer conn.Close()
			sync := "FULL"
			if !durable {
				sync = "NORMAL"
				defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous=FULL`)
			}
			if _, err = conn.ExecContext(ctx, `PRAGMA synchronous=`+sync); err != nil {
				return err
			}
			tx, err = conn.BeginTx(ctx, nil)
		}
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f(&wtx{execer: tx, Tx: tx, ctx: ctx, l: l, pool: pool}); err != nil {
			return err
		}
		return tx.Commit()
	}))
}

const recordCols = `status, attempt, failures, owner, lease_until, not_before, last_error, updated, fingerprint, value`

func scanRecord(key Key, row *sql.Row) (Record, bool, error) {
	r := Record{Key: key}
	var status string
	var lease, notBefore, updated int64
	err := row.Scan(&status, &r.Attempt, &r.Failures, &r.Owner, &lease, &notBefore, &r.LastError, &updated, &r.Fingerprint, &r.Value)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{Key: key}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	r.Status = Status(status)
	r.LeaseUntil = fromMicros(lease)
	r.NotBefore = fromMicros(notBefore)
	r.Updated = fromMicros(updated)
	return r, true, nil
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

const selectRecord = `SELECT ` + recordCols + ` FROM idem_runs WHERE job=? AND period=?`

// record reads the key's own record (not the horizon): one prepared
// primary-key read.
func (l *Ledger) record(ctx context.Context, key Key) (rec Record, ok bool, err error) {
	err = busyRetry(ctx, func() (err error) {
		rec, ok, err = scanRecord(key, l.queryRow(ctx, selectRecord, key.Job, key.Period))
		return err
	})
	return rec, ok, err
}
