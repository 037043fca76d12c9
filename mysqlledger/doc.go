// Package mysqlledger is an idem ledger in MySQL (8.0 or later) or MariaDB
// (10.6 or later), through database/sql and github.com/go-sql-driver/mysql:
// the store to use when the processes that run a job live on several hosts
// and the business data is in MySQL.
//
//	db, err := sql.Open("mysql", "app@tcp(db:3306)/settle?parseTime=false")
//	l, err := mysqlledger.New(ctx, db)
//	err = l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error { ... })
//
// Keys, modes, options and errors are the same as on idem's SQLite ledger,
// and the store passes idem's conformance suite (package idemtest).
// [Ledger.RunTx] hands fn a *sql.Tx: with GORM, sqlx, ent or sqlc on top
// of it, the business rows and the key's done mark commit in one
// transaction.
//
// # Tables
//
// The ledger keeps its tables in the connection's database, named with a
// prefix ("idem_" unless [WithTablePrefix]): runs, jobs, itemsets,
// item_set, item_chunks, item_lists, item_state, outbox, outbox_topics,
// limit_rates, limit_slots, reruns (idem.Rerun's requests), wakes (the
// Schedulers' wake marks: a reset, resolve or re-run request is seen by
// every running Scheduler within idem.SchedulerWakePoll) and meta (the
// schema version, [SchemaVersion], and the wake marks' counter). [New] creates them if needed: any number of processes
// may start at once against an empty database (one creates the tables
// under a named lock, GET_LOCK; the others wait for it and find them). A
// schema one version newer is used as it is; two or more versions newer
// is refused with [idem.ErrNewerSchema], without a write. The user needs
// CREATE the first time, then SELECT, INSERT, UPDATE and DELETE.
//
// # MySQL's traps, and what the ledger does about them
//
//   - Isolation: InnoDB's default is REPEATABLE READ, whose locking reads
//     take gap locks (two claims of new keys then deadlock) and whose
//     snapshot hides what others committed meanwhile. Every transaction
//     of the ledger, RunTx's included, is READ COMMITTED (set per
//     transaction; the session's default is left alone). fn's own reads
//     in RunTx are then READ COMMITTED too. A deadlock the server reports
//     (1213, which rolls the transaction back) is retried by the ledger's
//     own transactions, never by RunTx's, whose fn is the caller's.
//   - Durability: a commit survives power loss only with
//     innodb_flush_log_at_trx_commit=1 and, with the binary log on,
//     sync_binlog=1. [New] refuses a server without them
//     ([ErrWeakDurability]) unless [AllowWeakDurability].
//   - max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8.0): a
//     larger statement makes the server close the connection. An item set
//     is written in INSERTs of 500 items and chunks of at most 1 MiB of
//     item ids.
//   - wait_timeout (8 hours by default) closes idle connections on the
//     server's side: set db.SetConnMaxLifetime or SetConnMaxIdleTime below
//     it. A statement that fails on such a connection is an error of that
//     call; the engine retries a done mark ([idem.RunOn] re-reads the
//     record when an answer was lost).
//   - Collations: keys (job, period, item, topic, message id) are
//     VARBINARY, compared byte by byte as Go compares strings: no case or
//     accent folding, and no PAD SPACE (under utf8mb4_bin "a" and "a "
//     are one key). Text for people is utf8mb4.
//   - Time: times are BIGINT microseconds since the Unix epoch, on the
//     server's clock (UTC_TIMESTAMP(6), whatever the session's
//     time_zone): no DATETIME without (6) rounding away the
//     microseconds. Leases of runs and items and rate limits are on the
//     server's clock; the outbox's times are the relay's, as
//     idemstore.OutboxStore says.
//
// # MySQL and MariaDB
//
// The ledger's SQL runs on both unchanged. Where they differ: MariaDB has
// no system variable transaction_isolation before 11.1 (tx_isolation;
// the ledger sets the level per transaction with SET TRANSACTION, which
// both have); MySQL 8.0.20 deprecates VALUES() in ON DUPLICATE KEY UPDATE
// in favour of a row alias (INSERT ... AS new), which MariaDB lacks, so
// the ledger uses VALUES() (MySQL warns, and runs it); MySQL's NO PAD
// binary collation is utf8mb4_0900_bin, MariaDB's utf8mb4_nopad_bin
// (the ledger uses VARBINARY instead); FOR UPDATE SKIP LOCKED needs MySQL
// 8.0.1 or MariaDB 10.6.
//
// # What is not promised
//
// There are no batches in database/sql. A Run of a key with no record
// costs two round trips: the claim's INSERT and the done mark's UPDATE,
// each autocommitted (two synced commits, as a hand-written claim and done
// mark cost). A trigger of a key that is settled (done, most often) costs
// one, a primary-key read with no transaction and no lock, once the key
// claimed before it had a record too: the first one after new keys tries
// the INSERT first (it fails on the duplicate key, writing nothing), then
// reads. A claim that takes a key with a record costs a few more (the
// record under its lock, the job's horizon, the write, the commit). RunTx
// of a key with no record claims it, runs fn and writes the done mark in
// one transaction (Ledger.ClaimFinishTx: four round trips beside fn's, one
// synced commit). Each records a period's item set in its turn
// (Ledger.RecordTurn: a named lock), in memory until the seal, which
// writes it in one transaction; it claims each chunk in a transaction of
// its own, and a window that ends every item done is one autocommitted
// UPDATE. A period's done mark is one INSERT of its record as done
// (Ledger.MarkFresh), which waits at most a second for a transaction that
// holds the period's row.
// Without interpolateParams=true in the DSN, the driver prepares each
// statement with arguments on the server (three round trips each). The
// SQLite ledger's history is not migrated: keys done there would run
// again, so switch over at a period boundary or mark the done periods with
// [Ledger.Resolve].
package mysqlledger
