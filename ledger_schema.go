package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SchemaVersion is the version of the ledger's tables that this version of
// idem writes. A lower one is upgraded. A ledger one version higher
// (SchemaVersion+1, written by the next release) is used as it is, never
// downgraded nor its version rewritten: every schema change is expand-only
// (new tables, new columns that are nullable or have a default; nothing
// that the version before reads or writes is dropped, renamed or retyped),
// so that releases N and N+1 share a ledger during a rolling update. Two
// or more versions higher is refused with [ErrNewerSchema], without a
// write. (Version 2 added the item
// tables of Each; version 3 records and claims items in chunks; version 4
// keeps a key's parameter fingerprint and its stored value; version 5
// adds the outbox, table idem_outbox; version 6 the limits shared by
// processes, tables idem_limit_rates and idem_limit_slots; version 7 the
// history of attempts, table idem_attempts, and the columns revision and
// started of idem_runs; version 8 the requests to re-run done periods,
// table idem_reruns, and the counts of records by job and status, table
// idem_job_counts kept by triggers, with the index of the records that
// need a look, idem_runs_attention: what the operators' page reads;
// version 9 the trigger idem_attempt_archive, which writes an attempt's
// history row when its record moves on rather than when it ends: a
// version-8 process reading the history of a version-9 ledger misses the
// last attempt of each record whose attempt a version-9 process ended, as
// that attempt is still on its record.)
const SchemaVersion = 9

// jobCountsSchema is version 8's summary of idem_runs: per job and status,
// how many records it holds and the latest updated of a record that
// entered it or changed in it. Triggers keep it in the transaction of
// every write to idem_runs, whoever writes (a version-7 process sharing
// the ledger too: the triggers are the database's), so Summarize reads a
// row per job and status instead of counting records. A record's insert
// adds one (ON CONFLICT DO NOTHING inserts nothing and fires nothing); an
// update of its status or updated moves it (a renew moves it within its
// status); a delete (Prune) removes it. The index idem_runs_attention holds
// the records that need a look (unknown, parked, failed), by job and
// period: the overview lists a page of them without reading the others.
// Neither changes what version 7 reads or writes.
const jobCountsSchema = `
CREATE TABLE IF NOT EXISTS idem_job_counts (
	job     TEXT    NOT NULL,
	status  TEXT    NOT NULL,
	n       INTEGER NOT NULL DEFAULT 0,
	updated INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job, status)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS idem_runs_count_insert AFTER INSERT ON idem_runs BEGIN
	INSERT INTO idem_job_counts(job, status, n, updated) VALUES (NEW.job, NEW.status, 1, NEW.updated)
		ON CONFLICT(job, status) DO UPDATE SET n = n + 1, updated = max(updated, excluded.updated);
END;
CREATE TRIGGER IF NOT EXISTS idem_runs_count_update AFTER UPDATE OF status, updated ON idem_runs BEGIN
	UPDATE idem_job_counts SET n = n - 1 WHERE job = OLD.job AND status = OLD.status;
	INSERT INTO idem_job_counts(job, status, n, updated) VALUES (NEW.job, NEW.status, 1, NEW.updated)
		ON CONFLICT(job, status) DO UPDATE SET n = n + 1, updated = max(updated, excluded.updated);
END;
CREATE TRIGGER IF NOT EXISTS idem_runs_count_delete AFTER DELETE ON idem_runs BEGIN
	UPDATE idem_job_counts SET n = n - 1 WHERE job = OLD.job AND status = OLD.status;
END;
` + attentionIndexSQL + `;
`

// attentionWhere is the WHERE of the partial index idem_runs_attention: the
// records that need a look. It is spelled with ORs, not as status IN (...):
// SQLite evaluates it for every row a write inserts or changes, and an IN
// of more than two values builds a temporary table each time a statement
// runs. Measured: a claim's INSERT and a done mark's statements took
// 25.7 µs of SQLite's time with the IN, 18.6 µs with ORs (as without the
// index); 16 goroutines doing 10,000 fresh Runs spent 0.47-0.49 s in the
// group's statements under the write lock with the IN, 0.32-0.39 s with
// ORs.
const attentionWhere = `status = 'unknown' OR status = 'parked' OR status = 'failed'`

// attentionIndexSQL creates the index idem_runs_attention.
const attentionIndexSQL = `CREATE INDEX IF NOT EXISTS idem_runs_attention ON idem_runs(job, period) WHERE ` + attentionWhere

// attentionWhereV8 is how version 8 spelled attentionWhere at first, and
// ledgers written then still spell it until opened by this version
// (respellAttention).
const attentionWhereV8 = `status IN ('unknown', 'parked', 'failed')`

// jobCountsFill counts the records a ledger had before version 8, once,
// in the transaction that creates the table and its triggers.
const jobCountsFill = `INSERT INTO idem_job_counts(job, status, n, updated)
	SELECT job, status, count(*), max(updated) FROM idem_runs WHERE true GROUP BY job, status
	ON CONFLICT(job, status) DO UPDATE SET n = excluded.n, updated = excluded.updated`

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
	if err := l.checkVersion(v); err != nil || v > SchemaVersion {
		return err
	}
	if v == SchemaVersion {
		return l.respellAttention(ctx)
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
		if err := l.checkVersion(v); err != nil || v >= SchemaVersion {
			return err // a concurrent opener migrated it (rolled back: nothing written)
		}
		if err := upgradeItems(ctx, tx); err != nil {
			return l.wrapOpenErr(err)
		}
		if v < 4 {
			// Version 4: the parameter fingerprint and the stored value
			// of a key (WithParams, RunValue). Records of
			// older versions have neither: no check, no value.
			for _, c := range []struct{ name, decl string }{{"fingerprint", `TEXT NOT NULL DEFAULT ''`}, {"value", `BLOB`}} {
				if err := addColumn(ctx, tx, "idem_runs", c.name, c.decl); err != nil {
					return l.wrapOpenErr(fmt.Errorf("upgrading to version 4: %w", err))
				}
			}
		}
		if v < 5 {
			// Version 5: the outbox (outbox.Put, Relay). Older
			// ledgers had none: an empty table.
			if _, err := tx.ExecContext(ctx, outboxSchema); err != nil {
				return l.wrapOpenErr(fmt.Errorf("upgrading to version 5: %w", err))
			}
		}
		if v < 6 {
			// Version 6: the shared limits (package limit).
			if _, err := tx.ExecContext(ctx, limitsSchema); err != nil {
				return l.wrapOpenErr(fmt.Errorf("upgrading to version 6: %w", err))
			}
		}
		if v < 7 {
			// Version 7: the history of attempts. Expand-only: a
			// version-6 process keeps working on it, and writes no
			// history.
			for _, c := range runsV7Columns {
				if err := addColumn(ctx, tx, "idem_runs", c.name, c.decl); err != nil {
					return l.wrapOpenErr(fmt.Errorf("upgrading to version 7: %w", err))
				}
			}
			if _, err := tx.ExecContext(ctx, attemptsSchema); err != nil {
				return l.wrapOpenErr(fmt.Errorf("upgrading to version 7: %w", err))
			}
		}
		if v < 8 {
			// Version 8: re-run requests (Rerun). A version-7 process
			// sharing the ledger re-runs a period whose revision a
			// request made (it is failed, runnable at once), and knows
			// no requests.
			if _, err := tx.ExecContext(ctx, rerunsSchema); err != nil {
				return l.wrapOpenErr(fmt.Errorf("upgrading to version 8: %w", err))
			}
			// Version 8: the counts by job and status (Summarize) and
			// the index of the records that need a look. Counting
			// the records there are reads each once, under the write
			// lock (about a second for a million).
			var have int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'idem_job_counts'`).Scan(&have); err != nil {
				return err
			}
			if have == 0 {
				for _, q := range []string{jobCountsSchema, jobCountsFill} {
					if _, err := tx.ExecContext(ctx, q); err != nil {
						return l.wrapOpenErr(fmt.Errorf("upgrading to version 8: %w", err))
					}
				}
			}
		}
		if v < 9 {
			// Version 9: an attempt's history row written when its
			// record moves on. The attempts that ended before have
			// their rows already.
			if _, err := tx.ExecContext(ctx, attemptArchiveSQL); err != nil {
				return l.wrapOpenErr(fmt.Errorf("upgrading to version 9: %w", err))
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_meta(name, value) VALUES('schema_version', ?)
			ON CONFLICT(name) DO UPDATE SET value=excluded.value`, SchemaVersion); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// respellAttention rewrites the index idem_runs_attention of a ledger of
// this version whose WHERE is spelled attentionWhereV8 (written by this
// version at first) as attentionWhere: the same records, a cheaper check
// for every write. It reads first, so a ledger spelled so already is not
// written; the rewrite reads idem_runs once, under the write lock, in one
// transaction (0.17 s for a million records). NOT promised: that a
// process built before the new spelling lists the records that need a
// look on a ledger rewritten so (its query names the index with the old
// spelling only, which SQLite then refuses with an error); no release
// had that spelling. This version's query works with either.
func (l *Ledger) respellAttention(ctx context.Context) error {
	spelledV8 := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) (bool, error) {
		var def string
		err := q.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'idem_runs_attention'`).Scan(&def)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil && strings.Contains(def, attentionWhereV8), err
	}
	old, err := spelledV8(l.db)
	if err != nil {
		return l.wrapOpenErr(err)
	}
	if !old {
		return nil
	}
	return busyRetry(ctx, func() error {
		conn, err := l.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, takeLockSQL); err != nil { // first statement a write: the lock
			return err
		}
		if old, err := spelledV8(tx); err != nil || !old {
			return err // another opener rewrote it (rolled back: nothing written)
		}
		for _, q := range []string{`DROP INDEX idem_runs_attention`, attentionIndexSQL} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return l.wrapOpenErr(fmt.Errorf("rewriting the index idem_runs_attention: %w", err))
			}
		}
		return tx.Commit()
	})
}

// checkVersion refuses a stored version more than one above
// SchemaVersion (see there: versions N and N+1 share a ledger).
func (l *Ledger) checkVersion(v int) error {
	if v > SchemaVersion+1 {
		return fmt.Errorf("%w: %s has version %d, this idem knows %d (left untouched; versions %d and %d may share a ledger: upgrade this process first)",
			ErrNewerSchema, l.where(), v, SchemaVersion, v-1, v)
	}
	return nil
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
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			if l.path != "" {
				if d := diagnose(l.path, "open or write", err); d != nil {
					return fmt.Errorf("idem: %s: cannot open or write: %w", l.where(), d)
				}
			}
			return fmt.Errorf("idem: %s: cannot open or write: %w", l.where(), err)
		}
	}
	return fmt.Errorf("idem: %s: %w", l.where(), err)
}

// addColumn adds column name to table unless it has it.
func addColumn(ctx context.Context, tx *sql.Tx, table, name, decl string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, table, name).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE `+table+` ADD COLUMN `+name+` `+decl)
	return err
}

// upgradeItems moves the items of a version 2 ledger (one table,
// idem_items, a row per item with its status) into version 3's tables:
// every item joins the item set, and keeps its status as a record of its
// own, so it is claimed one by one as before. Nothing is lost.
func upgradeItems(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='idem_items'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	for _, q := range []string{
		`INSERT INTO idem_item_set(job, period, item) SELECT job, period, item FROM idem_items WHERE true ON CONFLICT DO NOTHING`,
		`INSERT INTO idem_item_state(job, period, item, chunk, status, attempt, failures, doubt, owner, lease_until, not_before, last_error, updated)
			SELECT job, period, item, 0, status, attempt, failures, doubt, owner, lease_until, not_before, last_error, updated FROM idem_items WHERE true
			ON CONFLICT DO NOTHING`,
		`DROP TABLE idem_items`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("upgrading the item tables: %w", err)
		}
	}
	return nil
}
