package pgledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/dupes"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the schema that holds the ledger's tables unless
// [WithSchema] names another.
const DefaultSchema = "idem"

// SchemaVersion is the version of the ledger's tables that this version of
// pgledger writes. A lower one is upgraded in place. A schema one version
// higher (SchemaVersion+1, written by the next release) is used as it is,
// never downgraded nor its version rewritten: every schema change is
// expand-only (new tables, new columns that are nullable or have a
// default; nothing the version before reads or writes is dropped, renamed
// or retyped), so that releases N and N+1 share a schema during a rolling
// update. Two or more versions higher is refused with
// [idem.ErrNewerSchema], without a write. Version 2 added the items of [idem.Each] (tables
// items and itemsets); version 3 records and claims them in chunks (tables
// item_set, item_chunks, item_lists and item_state replace items); version
// 4 adds the columns fingerprint and value to runs (idem.WithParams,
// idem.RunValue; the records of older versions have neither). [New]
// upgrades a version-1, 2 or 3 schema in place; a version-2 schema's
// items keep their status. A process that still runs an older pgledger's
// Each (or Prune) fails on the upgraded schema, whose table items is gone:
// stop those first. Version 5 adds the outbox (table outbox; outbox.Put,
// idem.Relay). Version 6 adds the limits shared by every process (tables
// limit_rates and limit_slots; package limit) and the column digest of
// item_lists, with an index (see AddItems; an older pgledger writes chunks
// without it, which only makes their batches recorded again item by item),
// and the column checked of item_chunks: Each records a period's items with
// RecordItems, with no row per item in item_set, and SealItems checks them
// in one pass (an older pgledger's AddItems would not see those items: it
// refuses a version-6 schema, so stop the processes that run one first).
// Version 7 adds the function durable_commit and a trigger of it on each
// table, which makes every transaction that writes to the ledger commit
// durably whatever synchronous_commit its session has (see
// [AllowWeakDurability] for what no session can change). Version 8 adds
// the history of attempts (table attempts, written by triggers on runs, and
// the columns revision and started of runs; see history.go), expand-only:
// a version-7 pgledger keeps working on it. Version 9 adds the re-runs of
// done periods (table reruns, the function promote_rerun and its trigger
// on runs, and the partial index runs_revised; see rerun.go),
// expand-only: a version-8 pgledger keeps working on it, and its done
// marks give a period the revision of a request that waited for them.
// Its upgrade builds runs_revised, which holds the writes to runs for one
// scan of the table.
const SchemaVersion = 9

// Ledger is an idem store in PostgreSQL: one row per key in the table runs
// of its schema, keyed by (job, period). It implements [idemstore.Store],
// [idemstore.TxStore] (with [pgx.Tx]), [idemstore.CatchUpStore], [idemstore.Lister], and,
// for [idem.Each] and [idem.EachTx], [idemstore.ItemStore] and
// [idemstore.ItemTxStore] (with [pgx.Tx]), and, for [outbox.Put] and
// [idem.Relay], [idemstore.OutboxTxStore] (with [pgx.Tx]) and
// [idemstore.OutboxStore] (table outbox), and, for package limit,
// [idemstore.LimitStore] (tables limit_rates and limit_slots), and, for
// [idem.Rerun], [idemstore.Rerunner] (table reruns), and, for idem show,
// [idemstore.Historian] (tables attempts and reruns).
//
// A Ledger is safe for concurrent use by many goroutines, processes and
// hosts.
type Ledger struct {
	core
	pool  *pgxpool.Pool
	owned bool
}

// core is the ledger on a connection of either kind: every statement and
// the protocol around them, shared by [Ledger] (a pgx pool) and [DBLedger]
// (a *sql.DB), which add what takes their own transaction type.
type core struct {
	db       db
	schema   string
	defaults []idem.Option
	q        queries
	// dups is how often the ledger's recent claims found their key done:
	// while most did, a claim reads the status first (see Claim).
	dups *dupes.Recent
}

var (
	_ idemstore.Store                  = (*Ledger)(nil)
	_ idemstore.TxStore[pgx.Tx]        = (*Ledger)(nil)
	_ idemstore.FreshTxStore[pgx.Tx]   = (*Ledger)(nil)
	_ idemstore.ClaimFirst             = (*Ledger)(nil)
	_ idemstore.CatchUpStore           = (*Ledger)(nil)
	_ idemstore.CatchUpTxStore[pgx.Tx] = (*Ledger)(nil)
	_ idemstore.Rerunner               = (*Ledger)(nil)
	_ idemstore.Historian              = (*Ledger)(nil)
)

// An Option configures a Ledger, for [New] and [Open]. As with idem's own
// options, a nil one or one given a value it cannot take makes New and
// Open return an error matching [idem.ErrInvalidOption] that names it,
// before anything is written.
type Option func(*config)

type config struct {
	schema          string
	runOpts         []idem.Option
	allowSearchPath bool
	weak            bool
}

// WithSchema keeps the ledger's tables in the schema name instead of
// [DefaultSchema]. Ledgers in different schemas of one database are
// independent.
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

// WithRunOptions makes opts the defaults of every Run and RunTx on the
// ledger (a lease, a backoff, a logger...), and of idem's other calls that
// take the ledger as their store; options passed to a call override them
// (see [idem.Option]). An invalid one makes New and Open return an
// error matching [idem.ErrInvalidOption] before anything is written.
func WithRunOptions(opts ...idem.Option) Option {
	return func(c *config) { c.runOpts = append(c.runOpts, opts...) }
}

// New attaches a ledger to the caller's pool, creating its schema and
// tables if needed. Business tables in the same database can then commit
// with the ledger's done marks ([Ledger.RunTx]). Close does not close pool.
//
// It refuses, without writing anything, a schema two or more versions newer
// than [SchemaVersion] ([idem.ErrNewerSchema]), and a connection whose search_path
// names the schema ([ErrSchemaOnSearchPath]: a role named like the schema,
// with the default search_path), unless [AllowSchemaOnSearchPath], and a
// server that runs with fsync off ([ErrWeakDurability]), unless
// [AllowWeakDurability].
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Ledger, error) {
	if pool == nil {
		return nil, errors.New("pgledger: New with a nil pool")
	}
	c, err := newCore(ctx, pgxDB{pool}, opts)
	if err != nil {
		return nil, err
	}
	return &Ledger{core: c, pool: pool}, nil
}

// newCore checks opts and attaches a ledger to d, creating or upgrading its
// schema (migrate).
func newCore(ctx context.Context, d db, opts []Option) (core, error) {
	c := config{schema: DefaultSchema}
	for i, o := range opts {
		if o == nil {
			return core{}, fmt.Errorf("%w: pgledger: option %d of %d is nil", idem.ErrInvalidOption, i+1, len(opts))
		}
		o(&c)
	}
	if c.schema == "" || len(c.schema) > 63 || strings.ContainsRune(c.schema, 0) {
		return core{}, fmt.Errorf("%w: pgledger.WithSchema(%q): a schema name is 1 to 63 bytes, no NUL", idem.ErrInvalidOption, c.schema)
	}
	if err := idem.CheckStoreOptions(c.runOpts...); err != nil {
		return core{}, fmt.Errorf("pgledger: ledger in schema %q: %w", c.schema, err)
	}
	l := core{db: d, schema: c.schema, defaults: c.runOpts, q: newQueries(c.schema), dups: new(dupes.Recent)}
	if !c.allowSearchPath {
		if err := checkSearchPath(ctx, d, c.schema); err != nil {
			return core{}, err
		}
	}
	if err := checkDurability(ctx, d, c.schema, c.weak); err != nil {
		return core{}, err
	}
	if err := l.migrate(ctx); err != nil {
		return core{}, err
	}
	return l, nil
}

// Open connects to the database at dsn (a postgres:// URL or a key=value
// string, as pgxpool.ParseConfig accepts) with a pool of its own, and
// attaches a ledger to it as [New] does. Close closes the pool.
func Open(ctx context.Context, dsn string, opts ...Option) (*Ledger, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("pgledger: open: %w", err)
	}
	l, err := New(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	l.owned = true
	return l, nil
}

// Pool returns the ledger's pool, for business tables that live beside it.
func (l *Ledger) Pool() *pgxpool.Pool { return l.pool }

// Schema returns the name of the schema that holds the ledger's tables.
func (l *core) Schema() string { return l.schema }

// Close closes the pool if [Open] opened it; a pool passed to [New] stays
// open.
func (l *Ledger) Close() {
	if l.owned {
		l.pool.Close()
	}
}

// String describes the ledger for logs.
func (l *Ledger) String() string { return "pgledger.Ledger(schema " + strconv.Quote(l.schema) + ")" }

// Run runs fn for key on this ledger: see [idem.RunOn] for the protocol
// and [idem.AtLeastOnce], [idem.AtMostOnce] and [idem.TwoPhase] for what
// each mode guarantees.
func (l *Ledger) Run(ctx context.Context, key idemstore.Key, fn func(context.Context) error, opts ...idem.Option) error {
	return idem.RunOn(ctx, l, key, fn, opts...)
}

// RunTx runs fn in a transaction on the ledger's pool and commits its writes
// together with the key's done mark: both or neither, so the business
// effect in this database happens exactly once, whatever kills the process.
// While fn runs, the transaction holds the key's row lock, which keeps every
// other attempt out. Write idempotent, recomputing statements all the same
// (an upsert of the recomputed amount, never amount = amount + $1): they are
// what a re-run of a rolled-back attempt repeats.
//
// fn must use tx for its writes; writes through another connection are not
// part of the transaction. See [idem.RunTx].
func (l *Ledger) RunTx(ctx context.Context, key idemstore.Key, fn func(ctx context.Context, tx pgx.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, l, key, fn, opts...)
}

// Reset un-parks a parked key: it becomes runnable at once with its
// failure count cleared. It is Resolve(ctx, key, idem.ResolveRetry).
func (l *core) Reset(ctx context.Context, key idemstore.Key) error {
	return l.Resolve(ctx, key, idemstore.ResolveRetry)
}

// DefaultOptions returns the options given with [WithRunOptions]: the
// defaults of every Run, RunTx, CatchUp and Each on the ledger, which the
// idem engine applies before the call's own options.
func (l *core) DefaultOptions() []idem.Option { return l.defaults }

// lockID is the key of a PostgreSQL advisory lock for what, in this
// ledger's schema. Advisory locks are per database, so the schema is part
// of it; a collision only makes two unrelated operations wait for each
// other.
func (l *core) lockID(kind, what string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idem/pgledger\x00" + kind + "\x00" + l.schema + "\x00" + what))
	return int64(h.Sum64())
}

// migrate creates the schema and its tables if needed, or upgrades an older
// version's: every statement of the DDL is CREATE ... IF NOT EXISTS, so
// running it over an older schema adds only what the later versions added,
// and a version-2 schema's items are then moved into version 3's tables
// (upgradeItemsSQL), in the same transaction. It reads first: a schema of
// the current version needs no write (and no CREATE privilege), and a newer
// one must not see a single write.
func (l *core) migrate(ctx context.Context) error {
	// A creator that lost a race it could not see (another program's CREATE
	// SCHEMA, say, outside the advisory lock) fails with a unique violation
	// in the catalog: the next transaction sees what the winner committed,
	// so a few retries settle it.
	var err error
	for range 5 {
		if err = l.migrateOnce(ctx); err == nil || !catalogRace(err) {
			return err
		}
	}
	return err
}

// catalogRace reports whether err is a creation's race with a concurrent
// creator of the same object: unique_violation (23505, on a catalog's
// index), duplicate_schema (42P06), duplicate_table (42P07) or
// duplicate_object (42710).
func catalogRace(err error) bool {
	switch sqlState(err) {
	case "23505", "42P06", "42P07", "42710":
		return true
	}
	return false
}

// sqlState is the SQLSTATE code of err, a server's error as either driver
// reports it; "" for any other error.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// migrateOnce is one attempt of migrate, in one transaction.
func (l *core) migrateOnce(ctx context.Context) error {
	v, err := l.version(ctx, l.db)
	if err != nil {
		return l.schemaErr(err)
	}
	if err := l.checkVersion(v); err != nil || v >= SchemaVersion {
		return err
	}
	tx, err := l.db.begin(ctx)
	if err != nil {
		return l.schemaErr(err)
	}
	defer tx.rollback(context.WithoutCancel(ctx))
	// One creator at a time: concurrent CREATE ... IF NOT EXISTS of the same
	// schema or table can fail with a unique violation in the catalog.
	if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, l.lockID("schema", "")); err != nil {
		return l.schemaErr(err)
	}
	// Read again under the lock: a new statement's snapshot sees what the
	// last holder committed. version reads the catalog tables themselves
	// (see there): this session's catalog caches may still say that the
	// schema is missing, as they said before the wait.
	if v, err = l.version(ctx, tx); err != nil {
		return l.schemaErr(err)
	}
	if err := l.checkVersion(v); err != nil || v >= SchemaVersion {
		return err
	}
	if _, err := tx.exec(ctx, l.q.ddl); err != nil {
		return l.schemaErr(err)
	}
	if v == 2 {
		if _, err := tx.exec(ctx, l.q.upgradeItems); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading the items from version 2: %w", err))
		}
	}
	if v < 4 {
		if _, err := tx.exec(ctx, l.q.upgradeParams); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading to version 4: %w", err))
		}
	}
	if v < 5 {
		if _, err := tx.exec(ctx, l.oq(outboxDDL)); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading to version 5: %w", err))
		}
	}
	if v < 6 {
		if _, err := tx.exec(ctx, l.oq(limitsDDL)); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading to version 6: %w", err))
		}
	}
	if v < 7 {
		if _, err := tx.exec(ctx, l.oq(durableDDL())); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading to version 7: %w", err))
		}
	}
	if v < 8 {
		if _, err := tx.exec(ctx, l.oq(historyDDLAll())); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading to version 8: %w", err))
		}
	}
	if v < 9 {
		if _, err := tx.exec(ctx, l.oq(rerunsDDLAll())); err != nil {
			return l.schemaErr(fmt.Errorf("upgrading to version 9: %w", err))
		}
	}
	if _, err := tx.exec(ctx, l.q.setVersion, SchemaVersion); err != nil {
		return l.schemaErr(err)
	}
	if err := tx.commit(ctx); err != nil {
		return l.schemaErr(err)
	}
	return nil
}

// version reads the stored schema version; 0 if there is none yet.
//
// Whether the table meta exists is read from pg_class and pg_namespace
// with the statement's snapshot, not looked up by name (to_regclass): a
// name lookup goes through the session's catalog caches, which a wait for
// an advisory lock does not refresh. A session that looked the schema up
// before waiting for the creator's lock (its application's own DDL does,
// with a search_path that names it) would still find it missing after the
// creator committed, and its CREATE SCHEMA IF NOT EXISTS would then fail
// with a unique violation on pg_namespace. Opening the catalog tables in
// the statement also makes the session take in the creator's catalog
// changes (PostgreSQL processes them when it locks a relation), so that
// the statements after it see the schema's tables too.
func (l *core) version(ctx context.Context, q conn) (int64, error) {
	var exists bool
	if err := q.queryRow(ctx, versionExistsSQL, []any{l.schema}, &exists); err != nil || !exists {
		return 0, err
	}
	var v int64
	err := q.queryRow(ctx, l.q.getVersion, nil, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// versionExistsSQL reports whether the table meta exists in schema $1.
const versionExistsSQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
	JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = 'meta')`

// checkVersion refuses a stored version more than one above SchemaVersion
// (see there: versions N and N+1 share a schema).
func (l *core) checkVersion(v int64) error {
	if v > SchemaVersion+1 {
		return fmt.Errorf("%w: schema %q has version %d, this pgledger knows %d (left untouched; versions %d and %d may share a schema: upgrade this process first)",
			idem.ErrNewerSchema, l.schema, v, SchemaVersion, v-1, v)
	}
	return nil
}

func (l *core) schemaErr(err error) error {
	return fmt.Errorf("pgledger: schema %q: %w", l.schema, err)
}
