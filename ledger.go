package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/idemgo/idem/idemstore"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SchemaVersion is the version of the ledger's tables that this version of
// idem writes. A ledger with a higher version is refused with
// [ErrNewerSchema]; a lower one is upgraded (version 2 added the item
// tables of Each; version 3 records and claims items in chunks).
const SchemaVersion = 3

// Ledger is a [Store] in a SQLite database file (modernc.org/sqlite, pure
// Go): one row per key in table idem_runs, keyed by (job, period).
//
// Claims are short IMMEDIATE transactions; done marks are committed with
// synchronous=FULL, so a done mark that Run reported survives power loss.
// An AtLeastOnce claim is committed without a sync (a claim lost to power
// loss only means the work runs again), so a fresh Run costs one fsync.
//
// A SQLite ledger serves the processes of ONE host: SQLite's WAL mode needs
// shared memory, and network filesystems break its locks. For services on
// several machines use the Postgres ledger.
//
// A Ledger is safe for concurrent use by many goroutines and processes.
type Ledger struct {
	db       *sql.DB // synchronous=FULL (on an attached database: the caller's pool)
	fast     *sql.DB // synchronous=NORMAL, for claims that need no sync; nil when attached
	owned    bool
	path     string
	file     *ledgerConnector // an owned ledger's file, checked before each write; nil when attached
	defaults []Option
	clock    Clock    // for the times the ledger takes itself (Resolve's); WithClock among defaults
	stmts    sync.Map // stmtKey → *sql.Stmt: the driver caches no statements

	// wmu serializes this process's write transactions. SQLite allows one
	// writer at a time anyway; queueing here wakes the next writer at once,
	// where SQLite's busy handler would poll with sleeps of up to 100 ms.
	wmu sync.Mutex
	// wconns are the connections an owned ledger keeps for its own write
	// transactions, under wmu: [0] on db (synced commits), [1] on fast.
	wconns [2]*wconn
}

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

var (
	_ idemstore.CatchUpStore            = (*Ledger)(nil)
	_ idemstore.TxStore[*sql.Tx]        = (*Ledger)(nil)
	_ idemstore.FreshTxStore[*sql.Tx]   = (*Ledger)(nil)
	_ idemstore.CatchUpTxStore[*sql.Tx] = (*Ledger)(nil)
	_ idemstore.Lister                  = (*Ledger)(nil)
)

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// OpenLedger opens (creating it if needed) the ledger database at path. The
// directory must exist. opts become defaults for every Run on the ledger.
//
// It refuses, without writing anything: a path that is a directory or not
// a regular file, a file that is not a SQLite database, another
// application's SQLite database (one with tables of its own and no idem
// ledger in it: [ErrNotLedger]; attach to it with [NewLedger] instead), and
// a ledger of a newer schema version. Such a file is read only through a
// read-only connection and left byte for byte as it was.
//
// The file is created once, here. If it is deleted or replaced while the
// Ledger is open, the next claim, done mark or other write transaction,
// and every new connection, fail with [ErrLedgerReplaced] instead of
// creating a new, empty ledger. It does NOT stop a transaction already
// under way, or a lease renewal, from reaching the old file: the check is
// made as each write transaction starts.
//
// A directory or file that cannot be written is reported with its path
// and the reason (read-only, permission denied).
func OpenLedger(path string, opts ...Option) (*Ledger, error) {
	if path == "" {
		return nil, errors.New("idem: ledger path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("idem: ledger %s: %w", path, err)
	}
	exists, err := checkLedgerFile(abs)
	if err != nil {
		return nil, err
	}
	if !exists {
		if err := createLedgerFile(abs); err != nil {
			return nil, err
		}
	}
	id, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("idem: ledger %s: %w", abs, err)
	}
	db, err := openOwned(abs, id, "FULL")
	if err != nil {
		return nil, err
	}
	l, err := newLedger(context.Background(), db, abs, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	// A second pool for the claims that need no sync: switching PRAGMA
	// synchronous per transaction would cost three statements a Run.
	if l.fast, err = openOwned(abs, id, "NORMAL"); err != nil {
		db.Close()
		return nil, err
	}
	l.file = &ledgerConnector{path: abs, id: id}
	l.owned = true
	return l, nil
}

// checkLedgerFile checks, without writing, that path can be opened as a
// ledger, and reports whether the file exists.
func checkLedgerFile(path string) (exists bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		dir := filepath.Dir(path)
		di, derr := os.Stat(dir)
		if derr != nil {
			return false, fmt.Errorf("idem: ledger %s: directory: %w", path, derr)
		}
		if !di.IsDir() {
			return false, fmt.Errorf("idem: ledger %s: %s is not a directory", path, dir)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("idem: ledger %s: %w", path, err)
	case fi.IsDir():
		return true, fmt.Errorf("idem: ledger %s: is a directory", path)
	case !fi.Mode().IsRegular():
		return true, fmt.Errorf("idem: ledger %s: is %s, not a regular file (left untouched)", path, fileKind(fi.Mode()))
	case fi.Size() == 0:
		return true, nil
	}
	isSQLite, walMode, err := sqliteFileHeader(path)
	if err != nil {
		return true, fmt.Errorf("idem: ledger %s: %w", path, err)
	}
	if !isSQLite {
		return true, fmt.Errorf("idem: ledger %s: not a SQLite database (left untouched)", path)
	}
	return true, checkForeign(path, walMode)
}

// NewLedger attaches a ledger to the caller's SQLite database (opened with
// the "sqlite" driver of modernc.org/sqlite), so that business tables and the
// ledger live in one file and [Ledger.RunTx] can commit both in one
// transaction. It creates the idem_ tables if needed and switches the
// database to WAL mode. Close does not close db.
//
// A table of the database that bears a name of idem's (idem_runs,
// idem_jobs, ...) but not the columns idem gives it is the application's
// own: NewLedger refuses with [ErrNotLedger] before writing anything.
//
// idem sets PRAGMA synchronous on the connections it uses (FULL for done
// marks) and leaves them at FULL. For the best concurrency, open db with a
// busy_timeout and _txlock=immediate.
func NewLedger(ctx context.Context, db *sql.DB, opts ...Option) (*Ledger, error) {
	return newLedger(ctx, db, "", opts)
}

func newLedger(ctx context.Context, db *sql.DB, path string, opts []Option) (*Ledger, error) {
	l := &Ledger{db: db, path: path, defaults: opts, clock: storeClock(opts)}
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Path returns the database file's path ("" for an attached database).
func (l *Ledger) Path() string { return l.path }

// DB returns the ledger's database, for business tables that live beside it.
func (l *Ledger) DB() *sql.DB { return l.db }

// Close closes the database if OpenLedger opened it, and the statements
// the ledger prepared.
func (l *Ledger) Close() error {
	l.wmu.Lock()
	for i, w := range l.wconns {
		if w != nil {
			w.close()
			l.wconns[i] = nil
		}
	}
	l.wmu.Unlock()
	l.stmts.Range(func(k, v any) bool {
		v.(*sql.Stmt).Close()
		l.stmts.Delete(k)
		return true
	})
	if !l.owned {
		return nil
	}
	return errors.Join(l.fast.Close(), l.db.Close())
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

func (l *Ledger) where() string {
	if l.path != "" {
		return "ledger " + l.path
	}
	return "ledger"
}

const schema = `
CREATE TABLE IF NOT EXISTS idem_meta (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_runs (
	job         TEXT    NOT NULL,
	period      TEXT    NOT NULL,
	status      TEXT    NOT NULL,
	attempt     INTEGER NOT NULL,
	failures    INTEGER NOT NULL DEFAULT 0,
	owner       TEXT    NOT NULL DEFAULT '',
	lease_until INTEGER NOT NULL DEFAULT 0,
	not_before  INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT    NOT NULL DEFAULT '',
	created     INTEGER NOT NULL,
	updated     INTEGER NOT NULL,
	PRIMARY KEY (job, period)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_jobs (
	job     TEXT PRIMARY KEY,
	cursor  TEXT NOT NULL DEFAULT '',
	horizon TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
-- Each's items: the item set (one row per item, for uniqueness), its
-- chunks (claimed and marked done as a whole), and the records of the items
-- whose attempt did not end done (failed, unknown, parked; from then on they
-- are claimed one by one).
CREATE TABLE IF NOT EXISTS idem_item_set (
	job    TEXT NOT NULL,
	period TEXT NOT NULL,
	item   TEXT NOT NULL,
	PRIMARY KEY (job, period, item)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_item_chunks (
	job         TEXT    NOT NULL,
	period      TEXT    NOT NULL,
	chunk       INTEGER NOT NULL,
	n           INTEGER NOT NULL, -- items in the chunk
	status      TEXT    NOT NULL DEFAULT 'pending', -- pending, running, done
	attempt     INTEGER NOT NULL DEFAULT 0,
	failures    INTEGER NOT NULL DEFAULT 0,
	owner       TEXT    NOT NULL DEFAULT '',
	lease_until INTEGER NOT NULL DEFAULT 0,
	settled     INTEGER NOT NULL DEFAULT 0, -- items before this position are settled
	started     INTEGER NOT NULL DEFAULT 0, -- items before this position may have begun
	doubt       INTEGER NOT NULL DEFAULT 0, -- at the last claim: the abandoned attempt's started
	updated     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job, period, chunk)
) WITHOUT ROWID;
-- A chunk's item ids, one per line, written once (apart from the chunk's
-- state, which changes with every window).
CREATE TABLE IF NOT EXISTS idem_item_lists (
	job    TEXT    NOT NULL,
	period TEXT    NOT NULL,
	chunk  INTEGER NOT NULL,
	items  TEXT    NOT NULL,
	PRIMARY KEY (job, period, chunk)
);
CREATE INDEX IF NOT EXISTS idem_item_chunks_by_status ON idem_item_chunks(job, period, status);
CREATE TABLE IF NOT EXISTS idem_item_state (
	job         TEXT    NOT NULL,
	period      TEXT    NOT NULL,
	item        TEXT    NOT NULL,
	chunk       INTEGER NOT NULL DEFAULT 0, -- the chunk it left; 0 for an item recorded by version 2
	status      TEXT    NOT NULL,
	attempt     INTEGER NOT NULL DEFAULT 0,
	failures    INTEGER NOT NULL DEFAULT 0,
	doubt       INTEGER NOT NULL DEFAULT 0,
	owner       TEXT    NOT NULL DEFAULT '',
	lease_until INTEGER NOT NULL DEFAULT 0,
	not_before  INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT    NOT NULL DEFAULT '',
	updated     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job, period, item)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_item_state_by_status ON idem_item_state(job, period, status);
CREATE TABLE IF NOT EXISTS idem_itemsets (
	job    TEXT NOT NULL,
	period TEXT NOT NULL,
	sealed INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job, period)
) WITHOUT ROWID;
`

// schemaVersion reads the stored version; 0 if the ledger is new.
func schemaVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='idem_meta'`).Scan(&n)
	if err != nil || n == 0 {
		return 0, err
	}
	var v int
	err = q.QueryRowContext(ctx, `SELECT value FROM idem_meta WHERE name='schema_version'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

func (l *Ledger) migrate(ctx context.Context) error {
	// Read first: a newer ledger, or a database whose idem_ tables are not
	// idem's, must not see a single write.
	v, err := schemaVersion(ctx, l.db)
	if err != nil {
		return l.wrapOpenErr(err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("%w: %s has version %d, this idem knows %d", ErrNewerSchema, l.where(), v, SchemaVersion)
	}
	if v == SchemaVersion {
		return nil
	}
	if err := checkTableShapes(ctx, l.db, l.where()); err != nil {
		return l.wrapOpenErr(err)
	}
	return busyRetry(ctx, func() error {
		if _, err := l.db.ExecContext(ctx, `PRAGMA journal_mode=WAL`); err != nil {
			return err
		}
		conn, err := l.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil) // first statement a write: CREATE
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return l.wrapOpenErr(err)
		}
		v, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if v > SchemaVersion {
			return fmt.Errorf("%w: %s has version %d, this idem knows %d", ErrNewerSchema, l.where(), v, SchemaVersion)
		}
		if err := upgradeItems(ctx, tx); err != nil {
			return l.wrapOpenErr(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_meta(name, value) VALUES('schema_version', ?)
			ON CONFLICT(name) DO UPDATE SET value=excluded.value`, SchemaVersion); err != nil {
			return err
		}
		return tx.Commit()
	})
}

func (l *Ledger) wrapOpenErr(err error) error {
	if errors.Is(err, ErrNotLedger) || errors.Is(err, ErrLedgerReplaced) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("idem: %s: not a SQLite database (left untouched): %w", l.where(), err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR:
			if l.path != "" {
				if msg := unwritable(l.path); msg != "" {
					return fmt.Errorf("idem: %s: cannot open or write: %s: %w", l.where(), msg, err)
				}
			}
			return fmt.Errorf("idem: %s: cannot open or write: %w", l.where(), err)
		}
	}
	return fmt.Errorf("idem: %s: %w", l.where(), err)
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

const recordCols = `status, attempt, failures, owner, lease_until, not_before, last_error, updated`

func scanRecord(key Key, row *sql.Row) (Record, bool, error) {
	r := Record{Key: key}
	var status string
	var lease, notBefore, updated int64
	err := row.Scan(&status, &r.Attempt, &r.Failures, &r.Owner, &lease, &notBefore, &r.LastError, &updated)
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

// Lookup implements [idemstore.Store]: it returns the key's record. A period at or
// before the job's horizon, whose record was pruned, is reported done.
func (l *Ledger) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	rec, ok, err := l.record(ctx, key)
	if err != nil || ok {
		return rec, ok, err
	}
	var n int
	err = busyRetry(ctx, func() error {
		return l.queryRow(ctx, `SELECT count(*) FROM idem_jobs WHERE job=? AND horizon >= ?`, key.Job, key.Period).Scan(&n)
	})
	if n > 0 {
		return Record{Key: key, Status: StatusDone}, true, err
	}
	return rec, false, err
}

// Claim implements [idemstore.Store].
func (l *Ledger) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	c, settled, _, err := l.fastClaim(ctx, req)
	if err != nil || settled {
		return c, err
	}
	return l.claimTx(ctx, req)
}

// fastClaim is the claim's fast path: one prepared primary-key read of the
// status alone (each column read costs modernc.org/sqlite a name and a type
// lookup). A done key, the common duplicate trigger, needs nothing more; a
// live lease, a backoff or a parked key need the whole record, and no
// write: settled, c is the answer. Otherwise the key is to be taken by
// claimTx; found says whether it has a record.
func (l *Ledger) fastClaim(ctx context.Context, req idemstore.ClaimRequest) (c idemstore.Claim, settled, found bool, err error) {
	var status string
	err = busyRetry(ctx, func() error {
		return l.queryRow(ctx, `SELECT status FROM idem_runs WHERE job=? AND period=?`, req.Key.Job, req.Key.Period).Scan(&status)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idemstore.Claim{}, false, false, nil // the claim's INSERT checks the horizon
	case err != nil:
		return idemstore.Claim{}, false, false, l.opErr("claim", req.Key, err)
	case Status(status) == StatusDone:
		return idemstore.Claim{State: idemstore.ClaimDone, Record: Record{Key: req.Key, Status: StatusDone}}, true, true, nil
	}
	rec, found, err := l.record(ctx, req.Key)
	if err != nil {
		return idemstore.Claim{}, false, false, l.opErr("claim", req.Key, err)
	}
	if state, take, _ := idemstore.Decide(rec, found, req); !take {
		return idemstore.Claim{State: state, Record: rec}, true, found, nil
	}
	return idemstore.Claim{}, false, found, nil
}

// claimTx takes the key for a new attempt in a write transaction, deciding
// again under the write lock.
func (l *Ledger) claimTx(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	var c idemstore.Claim
	err := l.withTx(ctx, req.Durable, func(tx *wtx) error {
		now := micros(req.Now)
		until := micros(req.Now.Add(req.Lease))
		res, err := tx.exec(claimInsertSQL, req.Key.Job, req.Key.Period, req.Owner, until, now, now, req.Key.Job, req.Key.Period)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			c = idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: Record{Key: req.Key}}
			return nil
		}
		// The row exists: decide again under the write lock.
		rec, found, err := scanRecord(req.Key, tx.queryRow(selectRecord, req.Key.Job, req.Key.Period))
		if err != nil {
			return err
		}
		if !found { // not inserted and no row: below the job's horizon
			c = idemstore.Claim{State: idemstore.ClaimDone, Record: Record{Key: req.Key, Status: StatusDone}}
			return nil
		}
		state, take, doubt := idemstore.Decide(rec, found, req)
		c = idemstore.Claim{State: state, Record: rec}
		if !take {
			return nil
		}
		c.Attempt, c.Doubt, c.Record = rec.Attempt+1, doubt, idemstore.TakenOver(rec, req.Now)
		_, err = tx.exec(`UPDATE idem_runs SET status='running', attempt=?, failures=?, owner=?,
			lease_until=?, not_before=0, last_error=?, updated=? WHERE job=? AND period=?`,
			c.Attempt, c.Record.Failures, req.Owner, until, c.Record.LastError, now, req.Key.Job, req.Key.Period)
		return err
	})
	if err != nil {
		return idemstore.Claim{}, l.opErr("claim", req.Key, err)
	}
	return c, nil
}

func (l *Ledger) opErr(op string, key Key, err error) error {
	if idemstore.IsStop(err) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotResolvable) || errors.Is(err, ErrLedgerReplaced) {
		return err
	}
	return fmt.Errorf("idem: %s: %s %s: %w", l.where(), op, key, err)
}

// Renew implements [idemstore.Store].
func (l *Ledger) Renew(ctx context.Context, key Key, attempt int64, now time.Time, lease time.Duration) error {
	var n int64
	err := busyRetry(ctx, func() error {
		st, err := l.prep(ctx, l.db, `UPDATE idem_runs SET lease_until=?, updated=?
			WHERE job=? AND period=? AND attempt=? AND status='running'`)
		if err != nil {
			return err
		}
		res, err := st.ExecContext(ctx, micros(now.Add(lease)), micros(now), key.Job, key.Period, attempt)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return l.opErr("renew", key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s attempt %d", ErrLeaseLost, key, attempt)
	}
	return nil
}

// Finish implements [idemstore.Store]. It always commits with synchronous=FULL.
func (l *Ledger) Finish(ctx context.Context, key Key, attempt int64, end idemstore.End) error {
	var n int64
	err := l.withTx(ctx, true, func(tx *wtx) error {
		var err error
		if n, err = finishExec(tx, key, attempt, end); err != nil || n == 0 {
			return err
		}
		if end.Cursor && end.Status == StatusDone {
			return advanceExec(tx, key.Job, key.Period)
		}
		return nil
	})
	if err != nil {
		return l.opErr("finish", key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s attempt %d", ErrLeaseLost, key, attempt)
	}
	return nil
}

func finishExec(tx *wtx, key Key, attempt int64, end idemstore.End) (int64, error) {
	res, err := tx.exec(`UPDATE idem_runs SET status=?, failures=?, not_before=?, last_error=?,
		lease_until=0, updated=? WHERE job=? AND period=? AND attempt=? AND status='running'`,
		string(end.Status), end.Failures, micros(end.NotBefore), end.Error, micros(end.Now),
		key.Job, key.Period, attempt)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func advanceExec(tx *wtx, job, period string) error {
	_, err := tx.exec(`INSERT INTO idem_jobs(job, cursor) VALUES(?, ?)
		ON CONFLICT(job) DO UPDATE SET cursor = excluded.cursor WHERE excluded.cursor > idem_jobs.cursor`, job, period)
	return err
}

// Job implements [idemstore.CatchUpStore].
func (l *Ledger) Job(ctx context.Context, job string) (JobState, error) {
	js := JobState{Job: job}
	err := busyRetry(ctx, func() error {
		err := l.db.QueryRowContext(ctx, `SELECT cursor, horizon FROM idem_jobs WHERE job=?`, job).Scan(&js.Cursor, &js.Horizon)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return JobState{}, fmt.Errorf("idem: %s: job %q: %w", l.where(), job, err)
	}
	return js, nil
}

// Start implements [idemstore.CatchUpStore]: it sets the job's cursor to before
// unless the job has one, and reads the job back, in one durable
// transaction.
func (l *Ledger) Start(ctx context.Context, job, before string) (JobState, error) {
	if err := (Key{Job: job, Period: before}).Validate(); err != nil {
		return JobState{}, err
	}
	js := JobState{Job: job}
	err := l.withTx(ctx, true, func(tx *wtx) error {
		if _, err := tx.exec(`INSERT INTO idem_jobs(job, cursor) VALUES(?, ?)
			ON CONFLICT(job) DO UPDATE SET cursor = excluded.cursor WHERE idem_jobs.cursor = ''`, job, before); err != nil {
			return err
		}
		return tx.queryRow(`SELECT cursor, horizon FROM idem_jobs WHERE job=?`, job).Scan(&js.Cursor, &js.Horizon)
	})
	if err != nil {
		return JobState{}, fmt.Errorf("idem: %s: start %s after %s: %w", l.where(), job, before, err)
	}
	return js, nil
}

// Advance implements [idemstore.CatchUpStore].
func (l *Ledger) Advance(ctx context.Context, job, period string) error {
	if err := (Key{Job: job, Period: period}).Validate(); err != nil {
		return err
	}
	err := l.withTx(ctx, true, func(tx *wtx) error { return advanceExec(tx, job, period) })
	if err != nil {
		return fmt.Errorf("idem: %s: advance %s to %s: %w", l.where(), job, period, err)
	}
	return nil
}

// Prune implements [idemstore.CatchUpStore]: it deletes the job's done and skipped
// records at or before through and raises the job's horizon to through, in
// one transaction.
func (l *Ledger) Prune(ctx context.Context, job, through string) (int64, error) {
	if err := (Key{Job: job, Period: through}).Validate(); err != nil {
		return 0, err
	}
	var deleted int64
	err := l.withTx(ctx, true, func(tx *wtx) error {
		// First statement a write: make sure the job's row exists.
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_jobs(job) VALUES(?) ON CONFLICT DO NOTHING`, job); err != nil {
			return err
		}
		var cursor string
		if err := tx.QueryRowContext(ctx, `SELECT cursor FROM idem_jobs WHERE job=?`, job).Scan(&cursor); err != nil {
			return err
		}
		var open int64
		var first sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT count(*), min(period) FROM idem_runs
			WHERE job=? AND period <= ? AND status NOT IN ('done', 'skipped')`, job, through).Scan(&open, &first); err != nil {
			return err
		}
		if err := idemstore.Prunable(job, through, cursor, open, first.String); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM idem_runs WHERE job=? AND period <= ?`, job, through)
		if err != nil {
			return err
		}
		deleted, _ = res.RowsAffected()
		// The item records of those periods (Each) go with them.
		for _, q := range []string{
			`DELETE FROM idem_item_set WHERE job=? AND period <= ?`,
			`DELETE FROM idem_item_chunks WHERE job=? AND period <= ?`,
			`DELETE FROM idem_item_lists WHERE job=? AND period <= ?`,
			`DELETE FROM idem_item_state WHERE job=? AND period <= ?`,
			`DELETE FROM idem_itemsets WHERE job=? AND period <= ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, job, through); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE idem_jobs SET horizon = ? WHERE job = ? AND horizon < ?`, through, job, through); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrPruneRefused) {
			return 0, err
		}
		return 0, fmt.Errorf("idem: %s: prune %s through %s: %w", l.where(), job, through, err)
	}
	return deleted, nil
}

// List implements [idemstore.Lister].
func (l *Ledger) List(ctx context.Context, f Filter) ([]Record, error) {
	q := `SELECT job, period, ` + recordCols + ` FROM idem_runs WHERE (? = '' OR job = ?) AND (? = '' OR status = ?) ORDER BY job, period`
	args := []any{f.Job, f.Job, string(f.Status), string(f.Status)}
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	var recs []Record
	err := busyRetry(ctx, func() error {
		recs = recs[:0]
		rows, err := l.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Record
			var status string
			var lease, notBefore, updated int64
			if err := rows.Scan(&r.Key.Job, &r.Key.Period, &status, &r.Attempt, &r.Failures, &r.Owner,
				&lease, &notBefore, &r.LastError, &updated); err != nil {
				return err
			}
			r.Status, r.LeaseUntil, r.NotBefore, r.Updated = Status(status), fromMicros(lease), fromMicros(notBefore), fromMicros(updated)
			recs = append(recs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: list: %w", l.where(), err)
	}
	return recs, nil
}

// claimInsertSQL records a key that has no record as attempt 1, running,
// unless the key is at or below its job's retention horizon.
const claimInsertSQL = `INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated)
	SELECT ?, ?, 'running', 1, ?, ?, ?, ?
	WHERE NOT EXISTS (SELECT 1 FROM idem_jobs WHERE job = ? AND horizon >= ?)
	ON CONFLICT DO NOTHING`

// ClaimFinishTx implements [idemstore.FreshTxStore]: for a key with no record, the
// claim's INSERT, fn (in a savepoint) and the done mark in one SQLite
// transaction, committed with synchronous=FULL. The transaction holds
// SQLite's write lock from the INSERT on, so no other attempt can claim the
// key meanwhile, and a crash leaves no record at all. A key with a record
// (a duplicate trigger, most often) is claimed as by Claim, after the same
// single read and without the write lock when it is done.
func (l *Ledger) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(*sql.Tx) error) (idemstore.Claim, bool, error) {
	key := req.Key
	c, settled, found, err := l.fastClaim(ctx, req)
	switch {
	case err != nil || settled:
		return c, false, err
	case found:
		c, err := l.claimTx(ctx, req)
		return c, false, err
	}
	var (
		inserted bool
		fnErr    error
	)
	err = l.withSQLTx(ctx, true, func(tx *wtx) error {
		inserted, fnErr = false, nil
		now, until := micros(req.Now), micros(req.Now.Add(req.Lease))
		res, err := tx.exec(claimInsertSQL, key.Job, key.Period, req.Owner, until, now, now, key.Job, key.Period)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // recorded meanwhile, or below the horizon: nothing written
		}
		inserted = true
		if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, key); err != nil {
			return err
		}
		if _, err := tx.exec(`SAVEPOINT idem_fn`); err != nil {
			return err
		}
		if ferr := fn(tx.Tx); ferr != nil {
			// fn's writes go; the claim stays, and is committed.
			if _, err := tx.exec(`ROLLBACK TO idem_fn`); err != nil {
				return err
			}
			if _, err := tx.exec(`RELEASE idem_fn`); err != nil {
				return err
			}
			fnErr = ferr
			return nil
		}
		if _, err := tx.exec(`RELEASE idem_fn`); err != nil {
			return err
		}
		if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
			return err
		}
		if _, err := finishExec(tx, key, 1, idemstore.End{Status: StatusDone, Now: req.Now}); err != nil || !cursor {
			return err
		}
		return advanceExec(tx, key.Job, key.Period)
	})
	switch {
	case err != nil:
		return idemstore.Claim{}, false, l.opErr("run tx", key, err)
	case !inserted:
		c, err := l.claimTx(ctx, req) // decides under the write lock
		return c, false, err
	}
	return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: Record{Key: key}}, fnErr == nil, fnErr
}

// FinishTx implements [idemstore.TxStore]: fn's writes and the done mark (and, with
// cursor, the job's catch-up cursor) commit in one SQLite transaction, with
// synchronous=FULL. The transaction holds SQLite's write lock from its first
// statement until it ends, so keep fn short: other writers to the file wait
// for it.
func (l *Ledger) FinishTx(ctx context.Context, key Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) error) error {
	err := l.withSQLTx(ctx, true, func(tx *wtx) error {
		// First statement: a write, which takes the lock and checks the fence.
		res, err := tx.exec(`UPDATE idem_runs SET updated=? WHERE job=? AND period=? AND attempt=? AND status='running'`,
			micros(now), key.Job, key.Period, attempt)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %s attempt %d", ErrLeaseLost, key, attempt)
		}
		if err := fn(tx.Tx); err != nil {
			return err
		}
		if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
			return err
		}
		if _, err := finishExec(tx, key, attempt, idemstore.End{Status: StatusDone, Now: now}); err != nil || !cursor {
			return err
		}
		return advanceExec(tx, key.Job, key.Period)
	})
	if err != nil {
		return l.opErr("run tx", key, err)
	}
	return nil
}

// Resolve implements [idemstore.Store]: it settles a key by hand. ResolveDone marks it
// done (the work did happen); ResolveRetry makes it runnable at once with
// its failure count cleared (the work did not happen). It refuses a key
// that is done or held by a live attempt, with [ErrNotResolvable].
func (l *Ledger) Resolve(ctx context.Context, key Key, to Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	err := l.withTx(ctx, true, func(tx *wtx) error {
		now := l.clock.Now()
		// First statement a write: touch the row if it exists.
		if _, err := tx.ExecContext(ctx, `UPDATE idem_runs SET updated=updated WHERE job=? AND period=?`, key.Job, key.Period); err != nil {
			return err
		}
		rec, found, err := scanRecord(key, tx.queryRow(selectRecord, key.Job, key.Period))
		if err != nil {
			return err
		}
		if !found {
			var pruned int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM idem_jobs WHERE job=? AND horizon >= ?`, key.Job, key.Period).Scan(&pruned); err != nil {
				return err
			}
			if pruned > 0 { // below the horizon: done forever
				rec, found = Record{Key: key, Status: StatusDone}, true
			}
		}
		if err := idemstore.Resolvable(rec, found, to, now); err != nil {
			return err
		}
		status, msg := idemstore.Resolved(rec, to)
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_runs(job, period, status, attempt, failures, last_error, created, updated)
			VALUES(?, ?, ?, 0, 0, ?, ?, ?)
			ON CONFLICT(job, period) DO UPDATE SET status=excluded.status, failures=0, not_before=0, lease_until=0,
				last_error=excluded.last_error, updated=excluded.updated`,
			key.Job, key.Period, string(status), msg, micros(now), micros(now)); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return l.opErr("resolve", key, err)
	}
	return nil
}

// Reset un-parks a key that gave up: it becomes runnable at once with its
// failure count cleared. It is Resolve(ctx, key, ResolveRetry).
func (l *Ledger) Reset(ctx context.Context, key Key) error { return l.Resolve(ctx, key, ResolveRetry) }

// Run runs fn for key on this ledger: see [RunWith] for the protocol and
// [AtLeastOnce], [AtMostOnce] and [TwoPhase] for what each mode guarantees.
func (l *Ledger) Run(ctx context.Context, key Key, fn func(context.Context) error, opts ...Option) error {
	return RunWith(ctx, l, key, fn, opts...)
}

// RunTx runs fn in a transaction on the ledger's database and commits its
// writes together with the key's done mark: both or neither, so the business
// effect in this database happens exactly once, whatever kills the process.
// Write idempotent, recomputing statements all the same (an upsert of the
// recomputed amount, never amount = amount + ?): they are what a re-run of a
// rolled-back attempt repeats.
//
// fn must use tx for its writes; writes through another connection are not
// part of the transaction. See [RunTxWith].
func (l *Ledger) RunTx(ctx context.Context, key Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	return RunTxWith(ctx, l, key, fn, opts...)
}

// CatchUpTx is [CatchUpTx] on this ledger: each due period's writes in tx,
// its done mark and the job's catch-up cursor commit in one transaction.
func (l *Ledger) CatchUpTx(ctx context.Context, job string, sched Schedule, fn func(ctx context.Context, tx *sql.Tx, p Period) error, opts ...Option) (CatchUpResult, error) {
	return CatchUpTx(ctx, l, job, sched, fn, opts...)
}

// DefaultOptions returns the options given to OpenLedger or NewLedger: the
// defaults of every Run, CatchUp and Each on the ledger.
func (l *Ledger) DefaultOptions() []Option { return l.defaults }

// String describes the ledger for logs.
func (l *Ledger) String() string { return "idem.Ledger(" + strconv.Quote(l.path) + ")" }
