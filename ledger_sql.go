package idem

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgo/idem/idemstore"
)

// wconn is a connection kept for the ledger's write transactions, with
// BEGIN IMMEDIATE and COMMIT run as statements and its statements prepared
// once. (A database/sql Tx starts a goroutine per transaction to watch its
// context; a Run would pay two.)
//
// The ledger's own statements on it (exec, scan) run on the driver's
// connection itself (sql.Conn.Raw), prepared once there: database/sql's
// statement, argument and row handling cost a duplicate trigger's read a
// fifth of its time. Every use of a wconn is under the ledger's write
// lock (writeLock), so the scratch fields below have one user at a time.
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt // for queryRow, and fn's transaction (withSQLTx)
	// normal: the connection is at synchronous=NORMAL (else FULL, as its
	// pool's DSN opens it).
	normal bool

	dstmts map[string]driver.Stmt // prepared on the driver's connection
	// The call in progress on the driver's connection, for rawFn (bound
	// once: a closure per call would be an allocation).
	op    rawOp
	rawFn func(any) error
}

// rawOp is one statement run on the driver's connection by wconn.raw.
type rawOp struct {
	ctx  context.Context
	q    string
	args []driver.NamedValue
	dest []any                      // a read: the first row's columns go here; nil for an exec
	each func([]driver.Value) error // a read of every row (query): called with each
	vals []driver.Value             // the row as the driver gives it
	res  driver.Result              // an exec's result
}

func newWconn(c *sql.Conn) *wconn {
	w := &wconn{conn: c, stmts: map[string]*sql.Stmt{}, dstmts: map[string]driver.Stmt{}}
	w.rawFn = w.raw
	return w
}

// setSync puts the connection at synchronous=FULL (durable: the next
// commit is synced) or NORMAL, with a prepared PRAGMA when it is not there
// already. One kept connection for the synced and the unsynced commits
// keeps its page cache: a connection that writes after another one wrote
// must drop its cache and read the pages again, which costs more than the
// two PRAGMAs a fresh Run switches with.
func (w *wconn) setSync(ctx context.Context, durable bool) error {
	if w.normal != durable {
		return nil
	}
	q := `PRAGMA synchronous=NORMAL`
	if durable {
		q = `PRAGMA synchronous=FULL`
	}
	if _, err := w.exec(ctx, q); err != nil {
		return err
	}
	w.normal = !durable
	return nil
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

// exec runs q with args, prepared once (BEGIN and COMMIT too: compiling
// them costs more than running them), on the driver's connection.
func (w *wconn) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := w.bind(args); err != nil {
		return nil, err
	}
	w.op.ctx, w.op.q, w.op.dest = ctx, q, nil
	err := w.conn.Raw(w.rawFn)
	res := w.op.res
	w.reset()
	if err != nil {
		return nil, err
	}
	return res, nil
}

// scan runs the read q with args, prepared once, on the driver's
// connection, and scans its first row into dest (*string or *[]byte), as
// Row.Scan would: sql.ErrNoRows when there is none.
func (w *wconn) scan(ctx context.Context, q string, args []any, dest ...any) error {
	if err := w.bind(args); err != nil {
		return err
	}
	w.op.ctx, w.op.q, w.op.dest = ctx, q, dest
	err := w.conn.Raw(w.rawFn)
	w.reset()
	return err
}

// query runs the read (or the statement with RETURNING) q with args,
// prepared once, on the driver's connection, and calls fn with each row's
// driver values (valid during the call only).
func (w *wconn) query(ctx context.Context, q string, args []any, fn func([]driver.Value) error) error {
	if err := w.bind(args); err != nil {
		return err
	}
	w.op.ctx, w.op.q, w.op.dest, w.op.each = ctx, q, nil, fn
	err := w.conn.Raw(w.rawFn)
	w.reset()
	return err
}

// reset drops the finished call's context, statement and arguments,
// keeping the scratch slices.
func (w *wconn) reset() {
	clear(w.op.args)
	w.op = rawOp{args: w.op.args[:0], vals: w.op.vals}
}

// bind converts args as database/sql would for a driver that checks no
// values itself (modernc.org/sqlite does not): into w.op.args.
func (w *wconn) bind(args []any) error {
	nv := w.op.args[:0]
	for i, a := range args {
		v := driver.NamedValue{Ordinal: i + 1}
		if na, ok := a.(sql.NamedArg); ok {
			v.Name, a = na.Name, na.Value
		}
		switch a := a.(type) {
		case nil, int64, string, []byte, float64, bool, time.Time:
			v.Value = a
		case int:
			v.Value = int64(a)
		default:
			cv, err := driver.DefaultParameterConverter.ConvertValue(a)
			if err != nil {
				return fmt.Errorf("sql: converting argument $%d type: %w", i+1, err)
			}
			v.Value = cv
		}
		nv = append(nv, v)
	}
	w.op.args = nv
	return nil
}

// raw runs w.op on the driver's connection dc (through sql.Conn.Raw).
func (w *wconn) raw(dc any) error {
	op := &w.op
	st, ok := w.dstmts[op.q]
	if !ok {
		p, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("idem: driver connection %T cannot prepare statements", dc)
		}
		var err error
		if st, err = p.PrepareContext(op.ctx, op.q); err != nil {
			return err
		}
		w.dstmts[op.q] = st
	}
	if op.each != nil {
		return queryEach(op, st)
	}
	if op.dest == nil {
		ex, ok := st.(driver.StmtExecContext)
		if !ok {
			return fmt.Errorf("idem: driver statement %T cannot exec", st)
		}
		res, err := ex.ExecContext(op.ctx, op.args)
		op.res = res
		return err
	}
	rows, vals, err := op.open(st)
	if err != nil {
		return err
	}
	err = rows.Next(vals)
	if err == nil {
		err = scanValues(vals, op.dest)
	} else if errors.Is(err, io.EOF) {
		err = sql.ErrNoRows
	}
	clear(vals)
	if cerr := rows.Close(); cerr != nil && (err == nil || errors.Is(err, sql.ErrNoRows)) {
		err = cerr
	}
	return err
}

// open runs op's read on st: its rows, and op's scratch row sized for them.
func (op *rawOp) open(st driver.Stmt) (driver.Rows, []driver.Value, error) {
	qu, ok := st.(driver.StmtQueryContext)
	if !ok {
		return nil, nil, fmt.Errorf("idem: driver statement %T cannot query", st)
	}
	rows, err := qu.QueryContext(op.ctx, op.args)
	if err != nil {
		return nil, nil, err
	}
	n := len(rows.Columns())
	if cap(op.vals) < n {
		op.vals = make([]driver.Value, n)
	}
	return rows, op.vals[:n], nil
}

// queryEach runs op's read on st and calls op.each with every row.
func queryEach(op *rawOp, st driver.Stmt) error {
	rows, vals, err := op.open(st)
	if err != nil {
		return err
	}
	for err == nil {
		if err = rows.Next(vals); err == nil {
			err = op.each(vals)
		}
	}
	clear(vals)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if cerr := rows.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// scanValues stores a row's driver values in dest, as Rows.Scan would for
// the destinations the ledger reads through wconn.scan (bytes copied: the
// driver may reuse them).
func scanValues(vals []driver.Value, dest []any) error {
	if len(vals) != len(dest) {
		return fmt.Errorf("sql: expected %d destination arguments in Scan, not %d", len(vals), len(dest))
	}
	for i, v := range vals {
		switch d := dest[i].(type) {
		case *string:
			switch v := v.(type) {
			case string:
				*d = v
			case []byte:
				*d = string(v)
			case int64:
				*d = strconv.FormatInt(v, 10)
			default:
				return fmt.Errorf("sql: Scan error on column index %d: converting %T to string is unsupported", i, v)
			}
		case *[]byte:
			switch v := v.(type) {
			case nil:
				*d = nil
			case []byte:
				*d = bytes.Clone(v)
			case string:
				*d = []byte(v)
			default:
				return fmt.Errorf("sql: Scan error on column index %d: converting %T to []byte is unsupported", i, v)
			}
		default:
			return fmt.Errorf("idem: scan into %T is not supported on the kept connection", d)
		}
	}
	return nil
}

// close ends a kept connection whose state is not known (a BEGIN, COMMIT
// or ROLLBACK failed: a transaction may still be open on it). The driver's
// connection is discarded, not handed back to the pool: sql.Conn.Close
// alone would return it, and the next write taking it from the pool would
// find itself inside that transaction.
func (w *wconn) close() error {
	for _, st := range w.stmts {
		st.Close()
	}
	_ = w.conn.Raw(func(any) error { // database/sql closes a connection that says it is bad
		for q, st := range w.dstmts {
			st.Close()
			delete(w.dstmts, q)
		}
		return driver.ErrBadConn
	})
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

// scanRead runs the prepared read q and scans its row into dest. On an
// owned ledger it runs on the kept write connection when no write of this
// process holds the write lock (it takes the lock for the read, never
// waiting for it), else on the FULL pool: on the connection that writes
// next, a fresh Run finds the database as that connection left it (a
// connection that reads after another one wrote must drop its page cache
// and read the pages again, which costs a fresh Run more than the read).
func (l *Ledger) scanRead(ctx context.Context, q string, args []any, dest ...any) error {
	if l.kept {
		if l.wl.tryAcquire() {
			err, ok := l.scanOnWriteConn(ctx, q, args, dest)
			l.wl.release()
			if ok {
				return err
			}
		}
	}
	return l.queryRow(ctx, q, args...).Scan(dest...)
}

// scanOnWriteConn is scanRead on the kept write connection, under the
// write lock; ok is false when that connection cannot be had.
func (l *Ledger) scanOnWriteConn(ctx context.Context, q string, args, dest []any) (err error, ok bool) {
	w, err := l.writeConn(ctx, 0, l.db)
	if err != nil {
		return nil, false
	}
	return w.scan(ctx, q, args, dest...), true
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
	// shift is how long the transaction waited for the write lock, by the
	// ledger's clock: at moves a time taken before it forward by as much.
	shift time.Duration
	began time.Time // the ledger's clock as the write began
}

// at is tm (a time the caller took before the write) moved forward by the
// transaction's wait for the write lock: what the clock read once the
// lock was held. A zero tm stays zero, and so does one that is not on the
// ledger's clock (more than sameClock from its reading as the write
// began: a call given a clock of its own, WithClock, whose times the
// ledger's clock cannot measure).
func (t *wtx) at(tm time.Time) time.Time {
	if tm.IsZero() || t.shift == 0 {
		return tm
	}
	if d := tm.Sub(t.began); d < -sameClock || d > sameClock {
		return tm
	}
	return tm.Add(t.shift)
}

// sameClock is how far a caller's time may be from the ledger's clock
// for at to take it as read on that clock.
const sameClock = time.Minute

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
	if t.wc != nil {
		return t.wc.exec(t.ctx, q, args...)
	}
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
	if err == nil {
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}

// busyRetry runs f again while it fails with "database is locked", until
// ctx ends, so that lock contention never reaches a caller as an error. It
// is for reads, which WAL mode lets run beside a writer; writes go through
// withTx, whose wait is bounded.
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

// lockWait runs try until it does not fail with "database is locked", at
// most until deadline (then the error matches ErrWriteLockHeld) or ctx's
// end. After a try found the database locked, the next waits for the lock
// in SQLite's busy handler, up to the time left (setTimeout sets the
// connection's busy_timeout; it is reset to 0 at the end), or, with
// setTimeout nil (an attached database), after a pollWait sleep.
func lockWait(ctx context.Context, ls *lockStart, setTimeout func(time.Duration), try func() error) error {
	start, deadline := ls.real, ls.deadline
	blocked := false // counted in ls.wl.blocked
	defer func() {
		if blocked {
			ls.wl.blocked.Add(-1)
		}
	}()
	if setTimeout != nil {
		defer func() {
			if ls.waited {
				setTimeout(0)
			}
		}()
	}
	for {
		err := try()
		if err == nil || !isBusy(err) {
			return err
		}
		ls.waited = true
		if !blocked && ls.wl != nil {
			blocked = true
			ls.wl.blocked.Add(1)
		}
		if ls.wl != nil {
			// A write that went ahead of an empty queue takes its number
			// now (writeQueue.turn).
			if err := ls.wl.joinQueue(ctx, ls); err != nil {
				return err
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return lockHeld(time.Since(start), err)
		}
		if setTimeout != nil {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w (while waiting for the write lock: %w)", context.Cause(ctx), err)
			}
			setTimeout(left)
			continue
		}
		if serr := sleepCtx(ctx, min(pollWait(time.Since(start)), left)); serr != nil {
			return fmt.Errorf("%w (while waiting for the write lock: %w)", serr, err)
		}
	}
}

// sleepCtx sleeps d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// lockStart is the start of a write's wait for the write lock.
type lockStart struct {
	real     time.Time // by the system clock: the bound counts from it
	clock    time.Time // by the ledger's clock
	deadline time.Time
	waited   bool // it had to wait (for another writer of this process, or SQLite's lock)
	wl       *writeLock
}

// beginWrite takes this process's turn to write, then the ledger's turn in
// its write queue (release gives both back), waiting at most the ledger's
// WithLockWait in all.
func (l *Ledger) beginWrite(ctx context.Context) (*lockStart, error) {
	ls := l.newLockStart()
	waited, err := l.wl.acquire(ctx, ls.real, ls.deadline)
	ls.waited = waited
	if err == nil {
		if err = l.wl.queueTurn(ctx, ls, false); err != nil {
			l.wl.release()
		}
	}
	return ls, err
}

// newLockStart starts a write's wait for its turn, now.
func (l *Ledger) newLockStart() *lockStart {
	now := time.Now()
	return &lockStart{real: now, clock: l.clock.Now(), deadline: now.Add(l.wl.wait), wl: &l.wl}
}

// startWrite is beginWrite; with now, it waits for this process's turn to
// write only behind writes of the ledger's own (claims, renewals, done
// marks, ...): if a write that runs a caller's function in its
// transaction (long: self of them is this call) holds the turn or waits
// for it, or a write of another handle is ahead of it in the write queue,
// it fails with errNotNow at once.
func (l *Ledger) startWrite(ctx context.Context, now bool, self int32) (*lockStart, error) {
	if !now {
		return l.beginWrite(ctx)
	}
	ls := l.newLockStart()
	if !l.wl.tryAcquire() {
		if l.wl.long.Load() > self {
			return nil, errNotNow
		}
		waited, err := l.wl.acquire(ctx, ls.real, ls.deadline)
		if errors.Is(err, ErrWriteLockHeld) {
			return nil, errNotNow
		}
		if err != nil {
			return nil, err
		}
		ls.waited = waited
	}
	// Writes of other processes queued before it are as another handle's
	// hold on SQLite's lock: not waited for. (An error here is met again
	// on the caller's usual path.)
	if err := l.wl.queueTurn(ctx, ls, true); err != nil {
		l.wl.release()
		return nil, errNotNow
	}
	return ls, nil
}

// lockWait is the function lockWait; with now, a try that finds the
// database locked is not repeated: errNotNow. (The kept connection's
// busy_timeout is 0 unless a write waits.)
func (l *Ledger) lockWait(ctx context.Context, ls *lockStart, now bool, setTimeout func(time.Duration), try func() error) error {
	if !now {
		return lockWait(ctx, ls, setTimeout, try)
	}
	err := try()
	if isBusy(err) {
		return errNotNow
	}
	return err
}

// locked is called once a write holds the write lock: it ends the wait,
// reports it to ctx's trace and returns shift (see wtx.shift).
func (l *Ledger) locked(ctx context.Context, ls *lockStart) time.Duration {
	idemstore.WriteLockWaited(ctx, time.Since(ls.real))
	return ls.shift(l.clock)
}

// shift is how long the write waited for the write lock by clock, if it
// had to wait: the times the caller took before it are moved forward by as
// much. A write that got the lock at once writes them as they are.
func (ls *lockStart) shift(clock Clock) time.Duration {
	if !ls.waited {
		return 0
	}
	return max(clock.Now().Sub(ls.clock), 0)
}

// writeConn returns the kept write connection i of an owned ledger, on
// pool, opening it if needed, with busy_timeout 0: a BEGIN that finds the
// database locked says so at once (the write waited: see lockStart.shift),
// and lockWait sets the timeout for the next.
func (l *Ledger) busyTimeout(i int) func(time.Duration) {
	return func(d time.Duration) {
		if w := l.wconns[i]; w != nil {
			ms := min(d.Milliseconds()+1, math.MaxInt32)
			w.conn.ExecContext(context.Background(), `PRAGMA busy_timeout=`+strconv.FormatInt(ms, 10))
		}
	}
}

func (l *Ledger) writeConn(ctx context.Context, i int, pool *sql.DB) (*wconn, error) {
	if w := l.wconns[i]; w != nil {
		return w, nil
	}
	c, err := pool.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.ExecContext(ctx, `PRAGMA busy_timeout=0`); err != nil {
		c.Close()
		return nil, err
	}
	w := newWconn(c)
	l.wconns[i] = w
	return w, nil
}

// withTx runs f in a write transaction and commits it when f returns nil,
// one write at a time in this process (in the order they came), again while
// SQLite answers "database is locked", for at most the ledger's
// WithLockWait: then it fails with an error matching ErrWriteLockHeld,
// having written nothing. Without durable, the commit is not synced
// (PRAGMA synchronous=NORMAL on the kept connection, which the next
// durable write sets back to FULL first; on an attached database's
// connection, set back to FULL afterwards); with it, it is.
//
// f runs once the transaction holds the write lock; tx.at moves the times
// the caller took before the write forward by how long it waited for the
// lock, so that a lease written counts from the write.
//
// Every transaction's first statement is a write, so it holds SQLite's write
// lock from its start whatever the database's _txlock: a deferred
// transaction that reads first and writes later fails with
// SQLITE_BUSY_SNAPSHOT, busy_timeout or not.
//
// An owned ledger runs it on a connection it keeps for writes (wconn); an
// attached one, and withSQLTx, in a database/sql Tx.
func (l *Ledger) withTx(ctx context.Context, durable bool, f func(*wtx) error) error {
	return l.writeTx(ctx, durable, false, f)
}

// errNotNow is the answer of a write transaction run with now (writeTx,
// sqlTx) that did not start: SQLite's write lock is held by another
// handle, or this process's turn to write is held by a transaction of a
// caller's function or did not come within WithLockWait. Nothing was
// written.
var errNotNow = errors.New("idem: the write lock is not free now")

// writeTx is withTx (on an owned ledger, in the ledger's group: groupTx);
// with now (an owned ledger only), it does not wait for
// SQLite's write lock, nor for this process's turn to write behind a
// transaction of a caller's function (startWrite): then it fails with
// errNotNow, having written nothing.
func (l *Ledger) writeTx(ctx context.Context, durable, now bool, f func(*wtx) error) error {
	return l.writeTxBatch(ctx, durable, now, f, nil)
}

// writeTxBatch is writeTx for a write that a group may run with others of
// its kind in one statement (b, ledger_batch.go); f is the write alone.
func (l *Ledger) writeTxBatch(ctx context.Context, durable, now bool, f func(*wtx) error, b *batchRow) error {
	if err := l.broken.get(); err != nil {
		return err
	}
	if !l.kept {
		if now {
			return errNotNow
		}
		return l.withSQLTx(ctx, durable, f)
	}
	return l.groupTx(ctx, durable, now, f, b) // runGroup checks the ledger's file
}

// takeLockSQL is a write that changes nothing: run first in a transaction
// on an attached database, it takes the write lock whatever the database's
// _txlock.
const takeLockSQL = `UPDATE idem_meta SET value = value WHERE 0`

// withSQLTx is withTx in a database/sql Tx, for transactions that hand the
// caller's fn a *sql.Tx (FinishTx, FinishItemsTx) and for attached
// databases.
func (l *Ledger) withSQLTx(ctx context.Context, durable bool, f func(*wtx) error) error {
	return l.sqlTx(ctx, durable, false, f)
}

// sqlTx is withSQLTx; with now, it fails with errNotNow instead of waiting,
// as writeTx does.
func (l *Ledger) sqlTx(ctx context.Context, durable, now bool, f func(*wtx) error) error {
	if err := l.broken.get(); err != nil {
		return err
	}
	if now && !l.kept {
		return errNotNow
	}
	if err := l.file.check(); err != nil {
		if now {
			return errNotNow
		}
		return err
	}
	if l.kept {
		// A transaction of the caller's fn: claims that come after a run
		// of new keys do not queue behind it (startWrite).
		l.wl.long.Add(1)
		defer l.wl.long.Add(-1)
	}
	ls, err := l.startWrite(ctx, now, 1)
	if err != nil {
		return err
	}
	defer l.wl.release()
	waiting := true // until the first try that gets the lock: locked reports the wait once
	var setTimeout func(time.Duration)
	if l.kept {
		setTimeout = l.busyTimeout(0)
	}
	return l.writeErr(l.lockWait(ctx, ls, now, setTimeout, func() error {
		pool := l.db
		var tx *sql.Tx
		var kept *wconn // the kept connection the Tx runs on: its prepared statements run in the Tx
		var err error
		if l.kept {
			const i = 0
			w, err := l.writeConn(ctx, i, pool)
			if err != nil {
				return err
			}
			if err := w.setSync(ctx, durable); err != nil {
				w.close()
				l.wconns[i] = nil
				return err
			}
			// _txlock=immediate: BEGIN IMMEDIATE.
			if tx, err = w.conn.BeginTx(ctx, nil); err != nil {
				if !isBusy(err) {
					w.close()
					l.wconns[i] = nil
				}
				return err
			}
			kept = w
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
			if tx, err = conn.BeginTx(ctx, nil); err != nil {
				return err
			}
			if _, err = tx.ExecContext(ctx, takeLockSQL); err != nil {
				tx.Rollback()
				return err
			}
		}
		defer tx.Rollback()
		var shift time.Duration
		if waiting {
			waiting = false
			shift = l.locked(ctx, ls)
		} else {
			shift = ls.shift(l.clock)
		}
		if err := f(&wtx{execer: tx, Tx: tx, wc: kept, ctx: ctx, l: l, pool: pool, shift: shift, began: ls.clock}); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if durable {
			return l.syncWALDir()
		}
		return nil
	}))
}

const recordCols = `status, attempt, failures, owner, lease_until, not_before, last_error, updated, fingerprint, value, revision`

func scanRecord(key Key, row *sql.Row) (Record, bool, error) {
	r := Record{Key: key}
	var status string
	var lease, notBefore, updated int64
	err := row.Scan(&status, &r.Attempt, &r.Failures, &r.Owner, &lease, &notBefore, &r.LastError, &updated, &r.Fingerprint, &r.Value, &r.Revision)
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
