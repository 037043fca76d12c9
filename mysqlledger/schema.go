package mysqlledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// tables are the quoted names of the ledger's tables.
type tables struct {
	meta, runs, jobs, itemsets, itemSet, itemChunks, itemLists, itemState string
	outbox, outboxTopics, limitRates, limitSlots                          string
	reruns, wakes                                                         string
}

func newTables(p string) tables {
	q := func(n string) string { return quoteIdent(p + n) }
	return tables{
		meta: q("meta"), runs: q("runs"), jobs: q("jobs"), itemsets: q("itemsets"), itemSet: q("item_set"),
		itemChunks: q("item_chunks"), itemLists: q("item_lists"), itemState: q("item_state"),
		outbox: q("outbox"), outboxTopics: q("outbox_topics"), limitRates: q("limit_rates"), limitSlots: q("limit_slots"),
		reruns: q("reruns"), wakes: q("wakes"),
	}
}

// The columns of keys (job, period, item, topic, message id, limit name)
// are VARBINARY: they compare byte by byte, as Go compares strings, with
// no collation to fold case or accents, and no PAD SPACE rule to make "a"
// and "a " one key (utf8mb4_bin pads on MySQL 8.0 and MariaDB alike; the
// NO PAD binary collations are named differently on each). Text for
// people (owners, errors, fingerprints) is utf8mb4. Times are BIGINT
// microseconds since the Unix epoch (UTC) on the server's clock: no
// DATETIME rounding to whole seconds (a DATETIME without (6) keeps none of
// the microseconds) and no session time_zone in between.
const tableOpts = ` ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// ddl creates the tables of the current version, or upgrades an older
// version's: every statement is CREATE TABLE IF NOT EXISTS or an ALTER
// TABLE that adds a column (ignored when the column exists), run one by
// one (MySQL commits each DDL statement on its own). Version 2 added the
// columns runs.revision and runs.rerun_pending and the table reruns
// (re-runs, rerun.go); version 3 the table wakes (wake.go).
func (l *Ledger) ddl() []string {
	t := l.t
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.meta + ` (name VARBINARY(64) NOT NULL PRIMARY KEY, version INT NOT NULL)` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.runs + ` (
			job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			status VARCHAR(16) CHARACTER SET ascii NOT NULL, attempt BIGINT NOT NULL, failures INT NOT NULL,
			owner TEXT NOT NULL, lease_until BIGINT NOT NULL, not_before BIGINT NOT NULL,
			last_error MEDIUMTEXT NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL,
			fingerprint TEXT NOT NULL, value MEDIUMBLOB NULL, revision BIGINT NOT NULL DEFAULT 0,
			rerun_pending BIGINT NOT NULL DEFAULT 0,
			PRIMARY KEY (job, period), KEY status_idx (status, job, period))` + tableOpts,
		`ALTER TABLE ` + t.runs + ` ADD COLUMN revision BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE ` + t.runs + ` ADD COLUMN rerun_pending BIGINT NOT NULL DEFAULT 0`,
		rerunsDDL(t),
		`CREATE TABLE IF NOT EXISTS ` + t.wakes + ` (job VARBINARY(255) NOT NULL PRIMARY KEY, mark BIGINT NOT NULL,
			KEY mark_idx (mark))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.jobs + ` (job VARBINARY(255) NOT NULL PRIMARY KEY,
			cursor_period VARBINARY(255) NOT NULL, horizon VARBINARY(255) NOT NULL)` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.itemsets + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			sealed TINYINT NOT NULL, PRIMARY KEY (job, period))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.itemSet + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			item VARBINARY(255) NOT NULL, PRIMARY KEY (job, period, item))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.itemChunks + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			chunk BIGINT NOT NULL, n INT NOT NULL, settled INT NOT NULL, started INT NOT NULL, doubt INT NOT NULL,
			status VARCHAR(16) CHARACTER SET ascii NOT NULL, attempt BIGINT NOT NULL, failures INT NOT NULL,
			owner TEXT NOT NULL, lease_until BIGINT NOT NULL, updated BIGINT NOT NULL,
			PRIMARY KEY (job, period, chunk))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.itemLists + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			chunk BIGINT NOT NULL, items LONGBLOB NOT NULL, PRIMARY KEY (job, period, chunk))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.itemState + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			item VARBINARY(255) NOT NULL, chunk BIGINT NOT NULL,
			status VARCHAR(16) CHARACTER SET ascii NOT NULL, attempt BIGINT NOT NULL, failures INT NOT NULL,
			owner TEXT NOT NULL, lease_until BIGINT NOT NULL, not_before BIGINT NOT NULL,
			last_error MEDIUMTEXT NOT NULL, doubt TINYINT NOT NULL, updated BIGINT NOT NULL,
			PRIMARY KEY (job, period, item), KEY status_idx (job, period, status))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.outbox + ` (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			id VARBINARY(255) NOT NULL, topic VARBINARY(255) NOT NULL, payload LONGBLOB NOT NULL, headers MEDIUMTEXT NOT NULL,
			job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL, item VARBINARY(255) NOT NULL, created BIGINT NOT NULL,
			status VARCHAR(16) CHARACTER SET ascii NOT NULL, attempts INT NOT NULL, token BIGINT NOT NULL,
			owner TEXT NOT NULL, lease_until BIGINT NOT NULL, not_before BIGINT NOT NULL, last_error MEDIUMTEXT NOT NULL,
			delivered BIGINT NOT NULL,
			UNIQUE KEY id_idx (id), KEY topic_idx (topic, status, seq), KEY status_idx (status, seq))` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.outboxTopics + ` (topic VARBINARY(255) NOT NULL PRIMARY KEY, puts BIGINT NOT NULL)` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.limitRates + ` (name VARBINARY(255) NOT NULL PRIMARY KEY, tat BIGINT NOT NULL)` + tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + t.limitSlots + ` (name VARBINARY(255) NOT NULL, slot INT NOT NULL,
			owner TEXT NOT NULL, token VARBINARY(255) NOT NULL, expires BIGINT NOT NULL, PRIMARY KEY (name, slot))` + tableOpts,
	}
}

// checkServer refuses a connection with no database, and a server that
// does not flush each commit, unless weak.
func (l *Ledger) checkServer(ctx context.Context, weak bool) error {
	var dbName sql.NullString
	var flush, logBin, syncBinlog int64
	var version string
	err := l.db.QueryRowContext(ctx, `SELECT DATABASE(), @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog, @@version`).
		Scan(&dbName, &flush, &logBin, &syncBinlog, &version)
	if err != nil {
		return fmt.Errorf("mysqlledger: reading the server's settings: %w", err)
	}
	if !dbName.Valid || dbName.String == "" {
		return errors.New("mysqlledger: the connection has no database selected: name one in the DSN (user@tcp(host:3306)/dbname)")
	}
	l.dbName = dbName.String
	l.q.markFresh = markFreshSQL(l.q.freshInsert, strings.Contains(version, "MariaDB"))
	if weak {
		return nil
	}
	if flush != 1 {
		return fmt.Errorf("%w: innodb_flush_log_at_trx_commit is %d, not 1 (set it to 1, or accept the risk with mysqlledger.AllowWeakDurability())", ErrWeakDurability, flush)
	}
	if logBin == 1 && syncBinlog != 1 {
		return fmt.Errorf("%w: the binary log is on and sync_binlog is %d, not 1 (set it to 1, or accept the risk with mysqlledger.AllowWeakDurability())", ErrWeakDurability, syncBinlog)
	}
	return nil
}

// lockName is the name of the server-wide lock (GET_LOCK) under which
// one process at a time creates or upgrades this ledger's tables: at most
// 64 characters, the database (read once, by checkServer: the database
// the ledger's unqualified table names are in) and the prefix in it.
func (l *Ledger) lockName() string {
	h := sha256.Sum256([]byte(l.dbName + "\x00" + l.prefix))
	return "idem/mysqlledger/" + hex.EncodeToString(h[:16])
}

// version reads the stored schema version: 0 when the table meta or its
// row is missing.
func (l *Ledger) version(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT version FROM `+l.t.meta+` WHERE name = 'schema'`).Scan(&v)
	switch {
	case errno(err) == 1146, errors.Is(err, sql.ErrNoRows): // ER_NO_SUCH_TABLE
		return 0, nil
	case err != nil:
		return 0, err
	}
	return v, nil
}

func checkVersion(v int) error {
	if v > SchemaVersion+1 {
		return fmt.Errorf("%w: mysqlledger: the ledger's tables are at version %d; this mysqlledger writes version %d and uses %d too, not later ones: upgrade mysqlledger",
			idem.ErrNewerSchema, v, SchemaVersion, SchemaVersion+1)
	}
	return nil
}

// migrate creates the tables if needed or upgrades an older version's. It
// reads first: a schema of the current version needs no write (nor the
// CREATE privilege), and a newer one must not see a single write. Creators
// take turns under a server-wide named lock (GET_LOCK) held by one
// connection: any number of processes may start at once against an empty
// database. MySQL commits DDL statements one by one, so a creator killed
// halfway leaves some tables: the next one creates the rest (CREATE TABLE
// IF NOT EXISTS), and the version is written last.
func (l *Ledger) migrate(ctx context.Context) error {
	v, err := l.version(ctx, l.db)
	if err != nil {
		return fmt.Errorf("mysqlledger: reading the schema version: %w", err)
	}
	if err := checkVersion(v); err != nil || v >= SchemaVersion {
		return err
	}
	c, err := l.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysqlledger: creating the tables: %w", err)
	}
	defer c.Close()
	name := l.lockName()
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, 120)`, name).Scan(&got); err != nil {
		return fmt.Errorf("mysqlledger: creating the tables: waiting for the schema lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return errors.New("mysqlledger: creating the tables: another process held the schema lock for 2 minutes")
	}
	defer c.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(?)`, name) //nolint:errcheck // closing the session releases it too
	if v, err = l.version(ctx, c); err != nil {
		return fmt.Errorf("mysqlledger: reading the schema version: %w", err)
	}
	if err := checkVersion(v); err != nil || v >= SchemaVersion {
		return err
	}
	for _, q := range l.ddl() {
		_, err := c.ExecContext(ctx, q)
		if errno(err) == erDupFieldName { // ADD COLUMN of a column the table has
			continue
		}
		if err != nil {
			return fmt.Errorf("mysqlledger: creating the tables: %s %s: %w", strings.Fields(q)[0], ddlTable(q), err)
		}
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO `+l.t.meta+` (name, version) VALUES ('schema', ?)
		ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))`, SchemaVersion); err != nil {
		return fmt.Errorf("mysqlledger: writing the schema version: %w", err)
	}
	return nil
}
