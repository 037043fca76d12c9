package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem/mysqlledger"
)

// diagnoseMySQL checks the MySQL (or MariaDB) ledger whose tables are
// named with prefix in the database of dsn, without writing to it: it
// only reads (SELECT), and never creates the tables. weak is
// --mysql-allow-weak-durability: a server that does not flush every
// commit is then a warning, not an error. The outbox is not checked.
func diagnoseMySQL(ctx context.Context, dsn, prefix string, weak bool) *doctorReport {
	if prefix == "" {
		prefix = mysqlledger.DefaultPrefix
	}
	rep := &doctorReport{Path: "mysql (prefix " + prefix + ")"}
	defer func() {
		rep.OK = true
		for _, f := range rep.Findings {
			if f.Level == levelError {
				rep.OK = false
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		rep.add(levelError, "connection", "cannot parse the DSN (--mysql / $%s): %v", EnvMySQL, err)
		return rep
	}
	where := fmt.Sprintf("%s(%s)/%s", cfg.Net, cfg.Addr, cfg.DBName)
	rep.Path = fmt.Sprintf("mysql %s@%s (prefix %s)", cfg.User, where, prefix)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		rep.add(levelError, "connection", "%s: %v", where, err)
		return rep
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	var version string
	var dbName sql.NullString
	var flush, logBin, syncBinlog int64
	err = db.QueryRowContext(ctx, `SELECT VERSION(), DATABASE(), @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog`).
		Scan(&version, &dbName, &flush, &logBin, &syncBinlog)
	if err != nil {
		rep.add(levelError, "connection", "cannot connect to %s as user %q: %v. Check the DSN (--mysql / $%s), that the server runs and accepts this host, and the user's password", where, cfg.User, err, EnvMySQL)
		return rep
	}
	if !dbName.Valid || dbName.String == "" {
		rep.add(levelError, "connection", "%s: the DSN selects no database: name one (user@tcp(host:3306)/dbname)", where)
		return rep
	}
	rep.add(levelOK, "connection", "server %s at %s, user %s", version, where, cfg.User)
	checkMySQLDurability(rep, flush, logBin == 1, syncBinlog, weak)

	q := func(table string) string { return "`" + prefix + table + "`" }
	if !checkMySQLSchema(ctx, rep, db, q("meta"), prefix) {
		return rep
	}
	checkMySQLKeys(ctx, rep, db, q("runs"), " --mysql DSN --mysql-prefix "+shellQuote(prefix))
	return rep
}

// checkMySQLDurability checks that the server flushes every commit, as
// mysqlledger.New does; weak is --mysql-allow-weak-durability.
func checkMySQLDurability(rep *doctorReport, flush int64, logBin bool, syncBinlog int64, weak bool) {
	level, what := levelError, "idem refuses this server (mysqlledger.ErrWeakDurability) unless --mysql-allow-weak-durability (mysqlledger.AllowWeakDurability()) accepts the loss"
	if weak {
		level, what = levelWarn, "accepted with --mysql-allow-weak-durability"
	}
	durable := true
	if flush != 1 {
		durable = false
		rep.add(level, "durability", "innodb_flush_log_at_trx_commit is %d, not 1: a power failure of the server's host can lose the done marks it acknowledged (a key then runs again); %s", flush, what)
	}
	if logBin && syncBinlog != 1 {
		durable = false
		rep.add(level, "durability", "the binary log is on and sync_binlog is %d, not 1: a power failure of the server's host can lose commits it acknowledged; %s", syncBinlog, what)
	}
	if durable {
		rep.add(levelOK, "durability", "innodb_flush_log_at_trx_commit is 1, and sync_binlog is 1 or the binary log is off")
	}
}

// checkMySQLSchema checks the ledger's schema version in table meta: false
// when there is no ledger to read or this idem cannot use it.
func checkMySQLSchema(ctx context.Context, rep *doctorReport, db *sql.DB, meta, prefix string) bool {
	var sv int
	err := db.QueryRowContext(ctx, `SELECT version FROM `+meta+` WHERE name = 'schema'`).Scan(&sv)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1146, errors.Is(err, sql.ErrNoRows): // no such table
		rep.add(levelWarn, "schema", "no ledger with prefix %s in this database yet (no table %smeta): the first 'idem run' creates it; check --mysql-prefix if one should be there", prefix, prefix)
		return false
	case err != nil:
		rep.add(levelError, "schema", "cannot read %s: %v", meta, err)
		return false
	case sv == mysqlledger.SchemaVersion+1:
		rep.add(levelWarn, "schema", "schema version %d, one newer than this idem's %d: the next release wrote it; this idem uses it as it is (as in a rolling update), upgrade it soon", sv, mysqlledger.SchemaVersion)
	case sv > mysqlledger.SchemaVersion:
		rep.add(levelError, "schema", "schema version %d, newer than this idem knows (%d) by more than one: a newer idem or mysqlledger wrote it; upgrade this idem binary (it refuses to touch the ledger)", sv, mysqlledger.SchemaVersion)
		return false
	case sv < mysqlledger.SchemaVersion:
		rep.add(levelWarn, "schema", "schema version %d, older than this idem's %d: the next 'idem run' upgrades it", sv, mysqlledger.SchemaVersion)
	default:
		rep.add(levelOK, "schema", "mysqlledger tables with prefix %s, version %d", prefix, sv)
	}
	return true
}

// checkMySQLKeys counts the ledger's records by status; hint is the flags
// of a command line that names the ledger.
func checkMySQLKeys(ctx context.Context, rep *doctorReport, db *sql.DB, runs, hint string) {
	const now = `CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS SIGNED)`
	rows, err := db.QueryContext(ctx, `SELECT status, COUNT(*), COALESCE(SUM(status = 'running' AND lease_until < `+now+`), 0)
		FROM `+runs+` GROUP BY status`)
	if err != nil {
		rep.add(levelError, "keys", "cannot read %s: %v", runs, err)
		return
	}
	defer rows.Close()
	counts := map[string]int64{}
	var expired, total int64
	for rows.Next() {
		var status string
		var n, exp int64
		if err := rows.Scan(&status, &n, &exp); err != nil {
			rep.add(levelError, "keys", "cannot read %s: %v", runs, err)
			return
		}
		counts[status] = n
		expired += exp
		total += n
	}
	if err := rows.Err(); err != nil {
		rep.add(levelError, "keys", "cannot read %s: %v", runs, err)
		return
	}
	var jobs int64
	_ = db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT job) FROM `+runs).Scan(&jobs)
	rep.add(levelOK, "keys", "%d records of %d jobs: %d done, %d skipped", total, jobs, counts["done"], counts["skipped"])
	if pending := counts["running"] + counts["failed"]; pending == 0 {
		rep.add(levelOK, "keys", "0 pending")
	} else {
		rep.add(levelOK, "keys", "%d pending (%d running, %d of them with an expired lease: runs that died, recovered by the next run; %d failed, retried by the next run after their backoff): 'idem ls%s --status pending'",
			pending, counts["running"], expired, counts["failed"], hint)
	}
	rep.needPerson(counts["unknown"], counts["parked"], hint)
}
