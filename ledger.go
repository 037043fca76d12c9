package idem

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/dupes"
)

// Ledger is a [Store] in a SQLite database file (modernc.org/sqlite, pure
// Go): one row per key in table idem_runs, keyed by (job, period).
//
// Claims are short IMMEDIATE transactions; done marks are committed with
// synchronous=FULL, so a done mark that Run reported survives power loss.
// An AtLeastOnce claim is committed without a sync (a claim lost to power
// loss only means the work runs again), so a fresh Run costs one fsync.
//
// A write that fails on the disk (a failed fsync, write or directory
// fsync; a full file system) is never reported done: the call returns the
// error, naming the file and the cause (errors.Is(err, syscall.ENOSPC) and
// the like), and the handle refuses every later write until the ledger is
// opened anew, since after a failed fsync the kernel may have dropped what
// it could not write. idem syncs the directory of the -wal file itself
// (SQLite ignores a failed directory fsync).
//
// A SQLite ledger serves the processes of ONE host: SQLite's WAL mode needs
// shared memory, and network filesystems break its locks. For services on
// several machines use the Postgres ledger.
//
// Its outbox (table idem_outbox: outbox.Put in a RunTx, EachTx or catch-up RunTx
// body, delivered by outbox.Relay) makes it an [idemstore.OutboxTxStore] of
// *sql.Tx and an [idemstore.OutboxStore].
//
// Writes (claims, lease renewals, done marks, outbox claims and ends) take
// the database's write lock, one at a time. A process's writers queue in
// the order they come, and those that wait while another holds the lock
// commit together once it is free (group commit, ledger_group.go): one
// transaction, each write in a savepoint of its own, one fsync for all, each
// call returning only once that commit is durable. A write whose own
// statements fail is rolled back alone; a commit or sync that fails fails
// every write of the group. The transactions that run a caller's function
// (RunTx, EachTx) commit on their own. On Linux the writers of every Ledger opened with
// OpenLedger on the file, in any process of the host, queue too, in a lock
// file beside it (<path>-lock, removed by the last handle to close it):
// a write waits behind at most 4 writes (one turn) of each handle queued
// before it, and a process killed in the queue or in its turn holds
// nobody up. Elsewhere, on an attached ledger ([NewLedger]), and against
// writers that are not such Ledgers (another program, the sqlite3 shell),
// a write waits in SQLite's busy handler, which sleeps and tries again and
// serves nobody in order. A write waits at most about [WithLockWait]
// (default [DefaultLockWait]) for it, and then fails with an error
// matching [ErrWriteLockHeld] that names the ledger, having written
// nothing: a long transaction of another writer (a backup, a migration,
// the application's own on a database shared through NewLedger) is
// reported, not waited out until the context ends. A write that waited
// writes the times it was given moved forward by its wait (by the
// ledger's clock): a lease counts from when its claim or renewal is
// written. An outbox claim that finds nothing due writes nothing. NOT
// promised: a bound on the wait below WithLockWait (that depends on the
// other writers), or an order of writers across processes where there is
// no queue.
//
// A Ledger is safe for concurrent use by many goroutines and processes.
type Ledger struct {
	db       *sql.DB // synchronous=FULL (on an attached database: the caller's pool)
	kept     bool    // owned (OpenLedger): its writes run on the connection it keeps (wconns)
	owned    bool
	path     string
	file     *ledgerConnector // an owned ledger's file, checked before each write transaction (a group's once); nil when attached
	defaults []Option
	clock    Clock    // for the times the ledger takes itself (Resolve's); WithClock among defaults
	stmts    sync.Map // stmtKey → *sql.Stmt: the driver caches no statements

	// wl serializes this process's write transactions, in the order they
	// come, each waiting at most WithLockWait. SQLite allows one writer at
	// a time anyway; queueing here wakes the next writer at once.
	wl writeLock
	// group gathers the ledger's own writes that wait for the write lock,
	// to commit them together (ledger_group.go).
	group groupCommit
	// wconns holds the connection an owned ledger keeps for its own write
	// transactions, under wl, on db: for the synced commits and the
	// unsynced ones alike (wconn.setSync), so that its page cache stays
	// valid from one write to the next.
	wconns [1]*wconn
	// dups counts the recent claims that found their key done (see
	// readFirst).
	dups dupes.Recent

	// dbFile is the database's file ("" for an in-memory or temporary
	// one): path, or for an attached database the file SQLite names.
	dbFile string
	// broken is the handle's fatal error once a write failed on the disk
	// (ledger_disk.go); walSynced the -wal file whose directory entry
	// was made durable (syncWALDir).
	broken    ledgerBroken
	walSynced atomic.Pointer[os.FileInfo]
}

// ledgerStore is a Ledger as the engine and the other stores' users
// (package idemstore) see it: the methods of the store interfaces that a
// Ledger's users never call are its, not the Ledger's
// ([idemstore.Of] returns it).
type ledgerStore struct{ *Ledger }

var (
	_ idemstore.CatchUpStore            = ledgerStore{}
	_ idemstore.TxStore[*sql.Tx]        = ledgerStore{}
	_ idemstore.FreshTxStore[*sql.Tx]   = ledgerStore{}
	_ idemstore.CatchUpTxStore[*sql.Tx] = ledgerStore{}
	_ idemstore.Lister                  = ledgerStore{}
	_ TxStore[*sql.Tx]                  = (*Ledger)(nil)
)

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// OpenLedger opens (creating it if needed) the ledger database at path. The
// directory must exist. opts become defaults for every call on the ledger
// (see [Option]); an invalid one is an error matching
// [ErrInvalidOption] that names path, returned before the file is touched.
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
	if err := storeConfig(opts).err; err != nil {
		return nil, fmt.Errorf("idem: ledger %s: %w", path, err)
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
	l.kept = true
	l.file = &ledgerConnector{path: abs, id: id}
	l.owned = true
	l.wl.q = openWriteQueue(abs, id)
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
// busy_timeout and _txlock=immediate. Its writes do not queue with other
// processes' (see [Ledger]): they wait for SQLite's lock in its busy
// handler, as the database's other writers do.
//
// opts become defaults for every call on the ledger (see [Option]); an
// invalid one is an error matching [ErrInvalidOption], returned before
// anything is written.
func NewLedger(ctx context.Context, db *sql.DB, opts ...Option) (*Ledger, error) {
	return newLedger(ctx, db, "", opts)
}

func newLedger(ctx context.Context, db *sql.DB, path string, opts []Option) (*Ledger, error) {
	cfg := storeConfig(opts)
	l := &Ledger{db: db, path: path, defaults: slices.Clone(opts), clock: cfg.clock}
	l.wl.sem = make(chan struct{}, 1)
	l.wl.wait = cmp.Or(cfg.lockWait, DefaultLockWait)
	if cfg.err != nil {
		return nil, fmt.Errorf("idem: %s: %w", l.where(), cfg.err)
	}
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	l.dbFile = path
	if path == "" {
		file, err := mainFile(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("idem: %s: %w", l.where(), err)
		}
		l.dbFile = file
	}
	// The -wal file exists now (migrate read the database): make its
	// directory entry durable before anything is written to it.
	if err := l.syncWALDir(); err != nil {
		return nil, fmt.Errorf("idem: %s: %w", l.where(), err)
	}
	return l, nil
}

// mainFile returns the file of the main database of db ("" for an
// in-memory or temporary one).
func mainFile(ctx context.Context, db *sql.DB) (string, error) {
	var file string
	err := busyRetry(ctx, func() error {
		return db.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file)
	})
	return file, err
}

// Path returns the database file's path ("" for an attached database).
func (l *Ledger) Path() string { return l.path }

// DB returns the ledger's database, for business tables that live beside it.
func (l *Ledger) DB() *sql.DB { return l.db }

// Close closes the database if OpenLedger opened it, and the statements
// the ledger prepared.
func (l *Ledger) Close() error {
	l.wl.sem <- struct{}{}
	for i, w := range l.wconns {
		if w != nil {
			w.close()
			l.wconns[i] = nil
		}
	}
	if l.wl.q != nil {
		l.wl.q.close()
		l.wl.q = nil
	}
	l.wl.release()
	l.stmts.Range(func(k, v any) bool {
		v.(*sql.Stmt).Close()
		l.stmts.Delete(k)
		return true
	})
	if !l.owned {
		return nil
	}
	return l.db.Close()
}

func (l *Ledger) where() string {
	if l.path != "" {
		return "ledger " + l.path
	}
	return "ledger"
}

func (l *Ledger) opErr(op string, key Key, err error) error {
	if idemstore.IsStop(err) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotResolvable) || errors.Is(err, ErrLedgerReplaced) {
		return err
	}
	return fmt.Errorf("idem: %s: %s %s: %w", l.where(), op, key, err)
}

// Run runs fn for key on this ledger: see [RunOn] for the protocol and
// [AtLeastOnce], [AtMostOnce] and [TwoPhase] for what each mode guarantees.
func (l *Ledger) Run(ctx context.Context, key Key, fn func(context.Context) error, opts ...Option) error {
	return RunOn(ctx, l, key, fn, opts...)
}

// RunTx runs fn in a transaction on the ledger's database and commits its
// writes together with the key's done mark: both or neither, so the business
// effect in this database happens exactly once, whatever kills the process.
// Write idempotent, recomputing statements all the same (an upsert of the
// recomputed amount, never amount = amount + ?): they are what a re-run of a
// rolled-back attempt repeats.
//
// fn must use tx for its writes; writes through another connection are not
// part of the transaction. See [RunTx].
func (l *Ledger) RunTx(ctx context.Context, key Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	return RunTx(ctx, l, key, fn, opts...)
}

// DefaultOptions returns the options given to OpenLedger or NewLedger: the
// defaults of every call on the ledger. The caller must not modify the
// slice.
func (l ledgerStore) DefaultOptions() []Option { return l.defaults }

// String describes the ledger for logs.
func (l *Ledger) String() string { return "idem.Ledger(" + strconv.Quote(l.path) + ")" }
