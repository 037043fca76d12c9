package mysqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// DefaultPrefix is the prefix of the ledger's table names unless
// [WithTablePrefix] gives another.
const DefaultPrefix = "idem_"

// SchemaVersion is the version of the ledger's tables that this version of
// mysqlledger writes. A lower one is upgraded in place. A schema one
// version higher (SchemaVersion+1, written by the next release) is used as
// it is, never downgraded nor its version rewritten: every schema change is
// expand-only (new tables, new columns that are nullable or have a
// default), so that releases N and N+1 share a schema during a rolling
// update. Two or more versions higher is refused with
// [idem.ErrNewerSchema], without a write. Version 1 is the first; version
// 2 keeps re-runs (the column runs.revision, the table reruns); version 3,
// the Schedulers' wake marks (the table wakes, wake.go).
const SchemaVersion = 3

// ErrWeakDurability: the server does not flush every commit to disk
// (innodb_flush_log_at_trx_commit is not 1, or the binary log is on and
// sync_binlog is not 1), so a done mark that Finish reported may be lost
// when the server's host loses power. [New] refuses such a server unless
// [AllowWeakDurability].
var ErrWeakDurability = errors.New("mysqlledger: the server does not flush each commit to disk")

// Ledger is an idem store in MySQL (8.0 or later) or MariaDB (10.6 or
// later), on the caller's *sql.DB (driver github.com/go-sql-driver/mysql):
// one row per key in the table runs, keyed by (job, period), leases and
// deadlines on the server's clock, every state change in a READ COMMITTED
// transaction under the key's row lock.
//
// It implements [idemstore.Store], [idemstore.TxStore] and
// [idemstore.FreshTxStore] (with *sql.Tx),
// [idemstore.CatchUpStore], [idemstore.Lister], [idemstore.ItemStore],
// [idemstore.ItemRecorder], [idemstore.ItemRecordTurns] and
// [idemstore.ItemTxStore] (with *sql.Tx), [idemstore.OutboxTxStore] (with
// *sql.Tx) and [idemstore.OutboxStore], [idemstore.LimitStore] and
// [idemstore.Rerunner] (idem.Rerun).
//
// A Ledger is safe for concurrent use by many goroutines, processes and
// hosts.
type Ledger struct {
	db       *sql.DB
	prefix   string
	dbName   string // the connection's database, read by checkServer
	defaults []idem.Option
	t        tables
	q        queries
	// readFirst: the last Claim or ClaimFinishTx found its key recorded
	// (duplicate triggers): the next one reads before it inserts.
	readFirst atomic.Bool
}

var (
	_ idemstore.CatchUpTxStore[*sql.Tx] = (*Ledger)(nil)
	_ idemstore.ItemTxStore[*sql.Tx]    = (*Ledger)(nil)
	_ idemstore.Lister                  = (*Ledger)(nil)
	_ idemstore.LimitStore              = (*Ledger)(nil)
	_ idemstore.OutboxTxStore[*sql.Tx]  = (*Ledger)(nil)
	_ idemstore.OutboxReleaser          = (*Ledger)(nil)
)

// An Option configures a Ledger, for [New]. A nil one or one given a value
// it cannot take makes New return an error matching [idem.ErrInvalidOption]
// that names it, before anything is written.
type Option func(*config)

type config struct {
	prefix  string
	runOpts []idem.Option
	weak    bool
}

// WithTablePrefix names the ledger's tables prefix+"runs", prefix+"jobs"
// and so on, in the connection's database, instead of [DefaultPrefix].
// Ledgers with different prefixes in one database are independent. A
// prefix is 1 to 32 bytes of ASCII letters, digits and underscores.
func WithTablePrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithRunOptions makes opts the defaults of every Run and RunTx on the
// ledger, and of idem's other calls that take the ledger as their store;
// options passed to a call override them.
func WithRunOptions(opts ...idem.Option) Option {
	return func(c *config) { c.runOpts = append(c.runOpts, opts...) }
}

// AllowWeakDurability accepts a server that does not flush every commit to
// disk (innodb_flush_log_at_trx_commit other than 1, or sync_binlog other
// than 1 with the binary log on): done marks may then be lost to a power
// failure of the server's host (not to a crash of the server process alone
// with innodb_flush_log_at_trx_commit=2), and their keys run again. Without
// it, [New] refuses such a server with [ErrWeakDurability].
func AllowWeakDurability() Option { return func(c *config) { c.weak = true } }

// New attaches a ledger to the caller's *sql.DB, opened with the driver
// github.com/go-sql-driver/mysql on a MySQL 8.0+ or MariaDB 10.6+ server,
// creating its tables in the connection's database if needed. Business
// tables in the same database commit with the ledger's done marks
// ([Ledger.RunTx]). The ledger never closes db.
//
// It refuses, without writing anything, a schema two or more versions
// newer than [SchemaVersion] ([idem.ErrNewerSchema]), a connection with no
// database selected, and a server that does not flush each commit
// ([ErrWeakDurability]) unless [AllowWeakDurability].
func New(ctx context.Context, db *sql.DB, opts ...Option) (*Ledger, error) {
	if db == nil {
		return nil, errors.New("mysqlledger: New with a nil *sql.DB")
	}
	c := config{prefix: DefaultPrefix}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: mysqlledger: option %d of %d is nil", idem.ErrInvalidOption, i+1, len(opts))
		}
		o(&c)
	}
	if !validPrefix(c.prefix) {
		return nil, fmt.Errorf("%w: mysqlledger.WithTablePrefix(%q): a prefix is 1 to 32 ASCII letters, digits or underscores", idem.ErrInvalidOption, c.prefix)
	}
	if err := idem.CheckStoreOptions(c.runOpts...); err != nil {
		return nil, fmt.Errorf("mysqlledger: ledger %q: %w", c.prefix, err)
	}
	l := &Ledger{db: db, prefix: c.prefix, defaults: c.runOpts, t: newTables(c.prefix)}
	l.q = newQueries(l.t)
	if err := l.checkServer(ctx, c.weak); err != nil {
		return nil, err
	}
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

func validPrefix(p string) bool {
	if p == "" || len(p) > 32 {
		return false
	}
	for _, r := range p {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// DB returns the ledger's *sql.DB, for business tables that live beside it.
func (l *Ledger) DB() *sql.DB { return l.db }

// Prefix returns the prefix of the ledger's table names.
func (l *Ledger) Prefix() string { return l.prefix }

// Table returns the quoted name of the ledger's table name ("runs",
// "jobs", ...), for operators' queries.
func (l *Ledger) Table(name string) string { return quoteIdent(l.prefix + name) }

// String describes the ledger for logs.
func (l *Ledger) String() string { return "mysqlledger.Ledger(prefix " + strconv.Quote(l.prefix) + ")" }

// DefaultOptions returns the options given with [WithRunOptions].
func (l *Ledger) DefaultOptions() []idem.Option { return l.defaults }

// Run runs fn for key on this ledger: see [idem.RunOn].
func (l *Ledger) Run(ctx context.Context, key idemstore.Key, fn func(context.Context) error, opts ...idem.Option) error {
	return idem.RunOn(ctx, l, key, fn, opts...)
}

// RunTx runs fn in a transaction on the ledger's *sql.DB and commits its
// writes together with the key's done mark: both or neither, so the
// business effect in this database happens exactly once, whatever kills
// the process. While fn runs, the transaction holds the key's row lock,
// which keeps every other attempt out. The transaction is READ COMMITTED
// (see the package's documentation). Write idempotent, recomputing
// statements: they are what a re-run of a rolled-back attempt repeats. fn
// must use tx for its writes (GORM: gorm.Open(mysql.New(mysql.Config{Conn:
// tx})); sqlx: sqlx.NewTx(tx, "mysql"); ent and sqlc take a *sql.Tx too);
// writes through another connection are not part of the transaction.
func (l *Ledger) RunTx(ctx context.Context, key idemstore.Key, fn func(ctx context.Context, tx *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, l, key, fn, opts...)
}

// Reset un-parks a parked key: Resolve(ctx, key, idem.ResolveRetry).
func (l *Ledger) Reset(ctx context.Context, key idemstore.Key) error {
	return l.Resolve(ctx, key, idemstore.ResolveRetry)
}

// quoteIdent quotes a MySQL identifier.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// nowSQL is the server's time in microseconds since the Unix epoch, UTC,
// whatever the session's time_zone.
const nowSQL = `CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS SIGNED)`

func micros(d time.Duration) int64 { return d.Microseconds() }

// fromMicros is a stored time; 0 is none.
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// errno is the server's error number of err, 0 for any other error.
func errno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// The server's errors the ledger handles.
const (
	erDupEntry        = 1062
	erDupFieldName    = 1060 // ER_DUP_FIELDNAME: ADD COLUMN of a column that exists
	erLockWaitTimeout = 1205
	erLockDeadlock    = 1213
)

// txOpts: every transaction of the ledger is READ COMMITTED: InnoDB's
// default REPEATABLE READ takes gap locks on the ranges that locking reads
// and updates scan, which deadlock concurrent claims of new keys, and its
// snapshot would hide what another transaction committed during a retry.
var txOpts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// retryable: the server rolled the whole transaction back (a deadlock)
// before the commit: running it again is safe.
func retryable(err error) bool { return errno(err) == erLockDeadlock }

// inTx runs fn in a READ COMMITTED transaction and commits it if fn
// returns nil; a deadlock (which rolls the transaction back) runs it again,
// a few times.
func (l *Ledger) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return inTxOn(ctx, l.db, fn)
}

// beginner begins transactions: a *sql.DB, or a *sql.Conn held for a turn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTxOn is inTx on b.
func inTxOn(ctx context.Context, b beginner, fn func(tx *sql.Tx) error) error {
	var err error
	for try := 0; try < 20; try++ {
		err = inTxOnce(ctx, b, fn)
		if !retryable(err) {
			return err
		}
		time.Sleep(time.Duration(try+1) * time.Millisecond)
	}
	return err
}

// exec runs one statement in a transaction of its own, again after a
// deadlock (which rolled it back).
func (l *Ledger) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	for try := 0; ; try++ {
		res, err := l.db.ExecContext(ctx, q, args...)
		if !retryable(err) || try == 19 {
			return res, err
		}
		time.Sleep(time.Duration(try+1) * time.Millisecond)
	}
}

func inTxOnce(ctx context.Context, b beginner, fn func(tx *sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, txOpts)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// opError is an error of the database, with the operation and key.
type opError struct {
	op  string
	key idemstore.Key
	err error
}

func (e *opError) Error() string {
	return "mysqlledger: " + e.op + " " + e.key.String() + ": " + e.err.Error()
}
func (e *opError) Unwrap() error { return e.err }

func opErr(op string, key idemstore.Key, err error) error {
	return &opError{op: op, key: key, err: err}
}
