package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// diagnosePostgres checks the Postgres ledger in schema of the database at
// dsn without writing to it: its session is read-only
// (default_transaction_read_only), and it never creates the schema. weak
// is --postgres-allow-weak-durability: fsync off is then a warning, not an
// error. now and outboxMaxAge are as in diagnose.
func diagnosePostgres(ctx context.Context, dsn, schema string, weak bool, now time.Time, outboxMaxAge time.Duration) *doctorReport {
	if schema == "" {
		schema = pgledger.DefaultSchema
	}
	rep := &doctorReport{Path: "postgres (schema " + schema + ")"}
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
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		rep.add(levelError, "connection", "cannot parse the DSN (--postgres / $%s): %v", EnvPostgres, err)
		return rep
	}
	cc := cfg.ConnConfig
	where := fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
	rep.Path = fmt.Sprintf("postgres://%s@%s (schema %s)", cc.User, where, schema)
	cfg.MaxConns = 1
	cc.RuntimeParams["default_transaction_read_only"] = "on"
	cc.RuntimeParams["application_name"] = "idem doctor"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		defer pool.Close()
		err = pool.Ping(ctx)
	}
	if err != nil {
		rep.add(levelError, "connection", "cannot connect to %s as role %q: %v. Check the DSN (--postgres / $%s), that the server runs and accepts this host, and the role's password", where, cc.User, err, EnvPostgres)
		return rep
	}
	var version, role, path string
	var versionNum int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int, current_user::text, current_setting('search_path')`).Scan(&version, &versionNum, &role, &path); err != nil {
		rep.add(levelError, "connection", "%s: %v", where, err)
		return rep
	}
	if !serverSupported(versionNum) {
		rep.add(levelError, "connection", "PostgreSQL %s at %s: pgledger needs PostgreSQL 12 or later", version, where)
		return rep
	}
	rep.add(levelOK, "connection", "PostgreSQL %s at %s, role %s", version, where, role)

	var fsync, fpw, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('full_page_writes'), current_setting('synchronous_commit')`).Scan(&fsync, &fpw, &syncCommit); err != nil {
		rep.add(levelError, "durability", "cannot read the server's fsync, full_page_writes and synchronous_commit: %v", err)
		return rep
	}
	checkDurability(rep, fsync, fpw, weak)

	switch err := pgledger.CheckSearchPath(ctx, pool, schema); {
	case errors.Is(err, pgledger.ErrSchemaOnSearchPath):
		rep.add(levelError, "search_path", "%s. idem and pgledger refuse this connection", strings.TrimPrefix(err.Error(), "pgledger: "))
	case err != nil:
		rep.add(levelError, "search_path", "%v", err)
	default:
		rep.add(levelOK, "search_path", "search_path %s of role %s does not reach the ledger's schema %s: the application's unqualified names stay out of it", path, role, schema)
	}

	q := func(sql string) string {
		return strings.ReplaceAll(sql, "{s}", pgx.Identifier{schema}.Sanitize())
	}
	sv, ok := checkPostgresSchema(ctx, rep, pool, q, schema, role)
	if !ok {
		return rep
	}
	if syncCommit == "off" {
		if sv >= 7 {
			rep.add(levelOK, "durability", "synchronous_commit is off by default for role %s's sessions; the ledger's commits raise it to on (trigger durable_commit on its tables), so its done marks and claims are durable when acknowledged; the application's other transactions are not", role)
		} else {
			rep.add(levelWarn, "durability", "synchronous_commit is off by default for role %s's sessions, and schema version %d does not raise it for the ledger's commits: a crash of the server can lose done marks and claims it acknowledged (a key then runs again) until the next 'idem run' (or pgledger.New) upgrades the schema to version 7", role, sv)
		}
	}

	hint := " --postgres DSN --postgres-schema " + shellQuote(schema)
	if !checkPostgresKeys(ctx, rep, pool, q, schema, hint) {
		return rep
	}
	switch b, ok, err := postgresOutboxBacklog(ctx, pool, schema, pgx.Identifier{schema}.Sanitize()); {
	case err != nil:
		rep.add(levelError, "outbox", "cannot read %s.outbox: %v", schema, err)
	case ok:
		rep.checkOutbox(b, now, outboxMaxAge, hint)
	}
	return rep
}

// checkDurability checks the server's fsync and full_page_writes; weak is
// --postgres-allow-weak-durability.
func checkDurability(rep *doctorReport, fsync, fpw string, weak bool) {
	durable := true
	if fsync != "on" {
		durable = false
		level, what := levelError, "idem refuses this server (pgledger.ErrWeakDurability) unless --postgres-allow-weak-durability (pgledger.AllowWeakDurability()) accepts the loss"
		if weak {
			level, what = levelWarn, "accepted with --postgres-allow-weak-durability"
		}
		rep.add(level, "durability", "the server runs with fsync %s: a crash of its host can lose the done marks and claims it acknowledged (a key then runs again), or corrupt its data files; %s. Set fsync = on (postgresql.conf, or ALTER SYSTEM SET fsync = on and SELECT pg_reload_conf())", fsync, what)
	}
	if fpw != "on" {
		durable = false
		rep.add(levelWarn, "durability", "the server runs with full_page_writes %s: a crash of its host can leave a torn page in its data files, unless the file system never writes a page partially (ZFS); set full_page_writes = on otherwise", fpw)
	}
	if durable {
		rep.add(levelOK, "durability", "the server runs with fsync on and full_page_writes on")
	}
}

// checkPostgresSchema checks the ledger's tables in schema (q puts its
// quoted name in a query's {s}): ok is false when there are none to read
// or this idem cannot use them; sv is their schema version.
func checkPostgresSchema(ctx context.Context, rep *doctorReport, pool *pgxpool.Pool, q func(string) string, schema, role string) (sv int64, ok bool) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
		JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'meta')`, schema).Scan(&exists); err != nil {
		rep.add(levelError, "schema", "cannot read the catalog: %v", err)
		return 0, false
	}
	if !exists {
		rep.add(levelWarn, "schema", "no ledger in schema %s yet (no table %s.meta): the first 'idem run' (or pgledger.New) creates it, if role %s may create schemas in the database; check --postgres-schema if one should be there", schema, schema, role)
		return 0, false
	}
	err := pool.QueryRow(ctx, q(`SELECT value FROM {s}.meta WHERE name = 'schema_version'`)).Scan(&sv)
	switch {
	case err != nil:
		rep.add(levelError, "schema", "no schema version in %s.meta (%v): the ledger's schema is incomplete, or role %s may not read it (it needs SELECT, INSERT, UPDATE and DELETE on the schema's tables)", schema, err, role)
		return 0, false
	case sv == pgledger.SchemaVersion+1:
		rep.add(levelWarn, "schema", "schema version %d, one newer than this idem's %d: the next release wrote it; this idem uses it as it is (as in a rolling update), upgrade it soon", sv, pgledger.SchemaVersion)
	case sv > pgledger.SchemaVersion:
		rep.add(levelError, "schema", "schema version %d, newer than this idem knows (%d) by more than one: a newer idem or pgledger wrote it; upgrade this idem binary (it refuses to touch the ledger)", sv, pgledger.SchemaVersion)
		return 0, false
	case sv < pgledger.SchemaVersion:
		rep.add(levelWarn, "schema", "schema version %d, older than this idem's %d: the next 'idem run' upgrades it (role %s then needs CREATE on schema %s and to own its tables)", sv, pgledger.SchemaVersion, role, schema)
	default:
		rep.add(levelOK, "schema", "pgledger schema %s, version %d", schema, sv)
	}
	return sv, true
}

// checkPostgresKeys counts the ledger's records by status; hint is the
// flags of a command line that names the ledger.
func checkPostgresKeys(ctx context.Context, rep *doctorReport, pool *pgxpool.Pool, q func(string) string, schema, hint string) bool {
	rows, err := pool.Query(ctx, q(`SELECT status, count(*), count(*) FILTER (WHERE status = 'running' AND lease_until < clock_timestamp())
		FROM {s}.runs GROUP BY status`))
	if err != nil {
		rep.add(levelError, "keys", "cannot read %s.runs: %v", schema, err)
		return false
	}
	counts := map[string]int64{}
	var expired, total int64
	for rows.Next() {
		var status string
		var n, exp int64
		if err := rows.Scan(&status, &n, &exp); err != nil {
			rows.Close()
			rep.add(levelError, "keys", "cannot read %s.runs: %v", schema, err)
			return false
		}
		counts[status] = n
		expired += exp
		total += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		rep.add(levelError, "keys", "cannot read %s.runs: %v", schema, err)
		return false
	}
	var jobs int64
	_ = pool.QueryRow(ctx, q(`SELECT count(DISTINCT job) FROM {s}.runs`)).Scan(&jobs)
	rep.add(levelOK, "keys", "%d records of %d jobs: %d done, %d skipped", total, jobs, counts["done"], counts["skipped"])
	if pending := counts["running"] + counts["failed"]; pending == 0 {
		rep.add(levelOK, "keys", "0 pending")
	} else {
		rep.add(levelOK, "keys", "%d pending (%d running, %d of them with an expired lease: runs that died, recovered by the next run; %d failed, retried by the next run after their backoff): 'idem ls%s --status pending'",
			pending, counts["running"], expired, counts["failed"], hint)
	}
	rep.needPerson(counts["unknown"], counts["parked"], hint)
	return true
}

// serverSupported reports whether a server of server_version_num num runs
// pgledger: PostgreSQL 12 or later (its statements set plan_cache_mode).
func serverSupported(num int) bool { return num >= 120000 }
