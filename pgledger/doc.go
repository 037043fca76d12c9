// Package pgledger is an idem ledger in PostgreSQL: the store to use when
// the processes that run a job live on several hosts.
//
// # When to move from the SQLite file
//
// idem's own ledger ([idem.OpenLedger]) is a SQLite file. It is the right
// choice as long as every process that runs a job shares one host (cron on
// one machine, several containers with one volume on one node): SQLite's WAL
// needs shared memory, and network filesystems break its locks. Once the
// same job can start on two machines (two cron hosts for redundancy, a
// Kubernetes CronJob whose Pods land on any node, a fleet of workers), put
// the ledger in PostgreSQL: every host then claims keys against one
// database, whose row locks and fenced updates keep the promises the SQLite
// file keeps on one host.
//
// # How
//
// Replace
//
//	l, err := idem.OpenLedger("/var/lib/settle/ledger.db")
//	err = l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error { ... })
//
// by
//
//	l, err := pgledger.Open(ctx, "postgres://settle@db/settle")  // or pgledger.New(ctx, yourPool)
//	err = l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error { ... })
//
// Keys, modes, options and errors are the same: Run, RunTx, Resolve and Reset
// behave as on the SQLite ledger, and the store passes idem's conformance
// suite (package idemtest). With [New] the ledger shares your pool, so
// [Ledger.RunTx] commits your business writes (in your tables, in the same
// database) together with the done mark: exactly once, whatever kills the
// process.
//
// It needs PostgreSQL 12 or later (the fan-out's statements set
// plan_cache_mode, which older servers lack).
//
// A service on database/sql (pgx's stdlib driver or lib/pq, with sqlx,
// GORM, ent or sqlc on top) uses [NewDB] on its own *sql.DB instead: the
// [DBLedger] it returns runs the same SQL and protocol, and its
// [DBLedger.RunTx] hands fn a *sql.Tx. The SQLite file's history is not migrated: keys that are done
// there would run again, so switch over at a period boundary (or mark the
// done periods with [Ledger.Resolve] and [idem.ResolveDone]).
//
// # Schema
//
// The ledger keeps its tables in a schema of their own ("idem" unless
// [WithSchema] says otherwise): runs (one row per key), jobs (catch-up
// cursor and retention horizon per job), item_set, item_chunks, item_lists,
// item_state and itemsets (the items of [idem.Each]: one row per item that
// AddItems recorded, for uniqueness (Each records per chunk, without them,
// and checks the chunks when it seals the set), the chunks they are
// claimed in and their item lists, the
// records of the items whose attempt did not end done, and whether a
// period's item set is complete), outbox (the outbox), limit_rates and
// limit_slots (the limits of package limit, shared by every process, on
// the server's clock) and meta (the schema version, [SchemaVersion], and
// the wake marks of [idemstore.Waker], which tell every running
// idem.Scheduler of a reset, a resolve, a re-run or a run-now).
// [New] creates them if needed, idempotently: any number of processes may
// start at once against an empty database, through [New] or [NewDB], also
// when their connections have run the application's own migrations first
// (one creates the tables under an advisory lock; the others find them; a
// creator that races another program's CREATE SCHEMA outside that lock
// retries). A schema one version newer (the
// next release's, during a rolling update) is used as it is; one two or
// more versions newer is refused with [idem.ErrNewerSchema], without a
// write; one of an older version is upgraded in place, under the same lock
// (the upgrade creates tables and adds columns: the user needs CREATE on
// the schema, and to own runs, then;
// from version 2 it also drops the table items, which the user must own).
// The database user needs CREATE on the database the first time (or create
// the schema for it), and then only SELECT, INSERT, UPDATE and DELETE on the
// schema's tables.
//
// The schema must not be on the connection's search_path, where it would
// capture the application's unqualified table names: a role named like
// the schema ("idem") has it there with PostgreSQL's default search_path
// ("$user", public). New and NewDB refuse such a connection before they
// write anything ([ErrSchemaOnSearchPath]); connect as a role with another
// name, or give the role a search_path without it.
//
// # Fan-out: Each and EachTx
//
// The ledger is an [idemstore.ItemStore] and an [idemstore.ItemTxStore] with
// [pgx.Tx]: [idem.Each] applies a function to every item of a period
// (every account, say) once, and [idem.EachTx] commits each batch's business
// writes with its items' done marks, in one transaction, each item in a
// savepoint. Items are recorded and claimed in chunks (the new items of one
// batch of the item stream): a window's done marks are one write to its
// chunk's row, and only the items whose attempt did not end done get a row
// of their own. Processes on any number of hosts may run Each for the same
// period at once: they claim disjoint chunks (and items) with FOR UPDATE
// SKIP LOCKED, never waiting for each other, and each claim reads about the
// rows it takes however large the period.
//
// # Time and durability
//
// Leases and backoff deadlines are kept on the database server's clock
// (clock_timestamp()), never on the clients': hosts whose clocks disagree
// still agree on when a lease has expired. The times the engine passes
// count only as durations (a backoff's NotBefore - Now, a renewed item
// lease's LeaseUntil - Now, from the server's time) and to express the
// deadlines a claim reports in the caller's clock (and
// ItemCounts.NextRetry is expressed on the process's own clock: time.Now()
// plus what remains of it on the server's, with that time.Now() in
// ItemCounts.Now, so an engine on idem.WithClock's clock waits the right
// duration).
//
// A done mark is durable when its commit returns, whatever
// synchronous_commit the server, the database or the role sets by default,
// or a session sets (fn in RunTx, a pool's AfterConnect): every statement
// that writes to the ledger's tables fires a trigger (durable_commit, schema
// version 7) that raises synchronous_commit from off to on for the rest of
// its transaction, so its COMMIT waits for the WAL flush (and for the
// synchronous standbys the server names, as any durable commit there does).
// It costs no round trip and a few microseconds of the server's time per
// statement; a value stronger than off is left as it is. pgledger turns it
// off, for their own transaction only, where nothing needs to survive
// power loss on its own: AtLeastOnce claims (of keys and of Each's chunks)
// and AddItems, whose commits the next synchronous commit flushes with it
// (WAL is flushed in order). What no session can change is refused: a
// server that runs with fsync off ([ErrWeakDurability]), unless
// [AllowWeakDurability]. A failover to a standby that had not received a
// commit loses it; pgledger does not wait for standbys beyond what the
// server's synchronous_standby_names asks. Periods are compared as byte strings (COLLATE "C"), as Go
// compares strings, whatever the database's collation.
package pgledger
