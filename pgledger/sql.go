package pgledger

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries are the ledger's SQL statements with its schema filled in.
type queries struct {
	ddl, getVersion, setVersion                   string
	read, insert, take, lockRow                   string
	renew, finish, fence, advance                 string
	resolveInsert, resolveUpdate                  string
	job, pruneCursor, pruneOpen, prune, pruneJobs string
	list                                          string
}

// Every comparison of periods is made with COLLATE "C" (byte order, as Go
// compares strings); the columns are declared with it too, so that the
// primary key's index serves range scans on period.
//
// Times come from the server's clock_timestamp(): the current time even
// inside a transaction that waited for a lock (now() is the transaction's
// start). Durations arrive as microseconds.
const (
	ddlSQL = `
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (
	name  text PRIMARY KEY,
	value bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.runs (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	status      text NOT NULL CHECK (status IN ('running', 'failed', 'done', 'unknown', 'parked', 'skipped')),
	attempt     bigint NOT NULL,
	failures    integer NOT NULL DEFAULT 0,
	owner       text NOT NULL DEFAULT '',
	lease_until timestamptz,
	not_before  timestamptz,
	last_error  text NOT NULL DEFAULT '',
	created     timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated     timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (job, period)
);
CREATE TABLE IF NOT EXISTS {s}.jobs (
	job     text COLLATE "C" PRIMARY KEY,
	cursor  text COLLATE "C" NOT NULL DEFAULT '',
	horizon text COLLATE "C" NOT NULL DEFAULT ''
);`

	getVersionSQL = `SELECT value FROM {s}.meta WHERE name = 'schema_version'`
	setVersionSQL = `INSERT INTO {s}.meta AS m (name, value) VALUES ('schema_version', $1)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE m.value < excluded.value`

	// readSQL is the claim's fast path and Lookup: the key's record (if
	// any), whether the job's horizon covers the period, and the server's
	// time. It always returns one row.
	readSQL = `SELECT clock_timestamp(), r.job IS NOT NULL, coalesce(r.status, ''), coalesce(r.attempt, 0),
		coalesce(r.failures, 0), coalesce(r.owner, ''), r.lease_until, r.not_before, coalesce(r.last_error, ''), r.updated,
		coalesce(j.horizon, '') >= $2 COLLATE "C"
	FROM (SELECT) AS one
	LEFT JOIN {s}.runs AS r ON r.job = $1 AND r.period = $2
	LEFT JOIN {s}.jobs AS j ON j.job = $1`

	// insertSQL takes a key that has no record, unless the job's horizon
	// covers it.
	insertSQL = `INSERT INTO {s}.runs(job, period, status, attempt, owner, lease_until, created, updated)
	SELECT $1, $2, 'running', 1, $3, clock_timestamp() + $4::float8 * interval '1 microsecond', clock_timestamp(), clock_timestamp()
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE job = $1 AND horizon >= $2 COLLATE "C")
	ON CONFLICT (job, period) DO NOTHING
	RETURNING attempt`

	// takeSQL takes a key whose record is still as the claim saw it (attempt
	// $4, status $5) and still claimable, for attempt+1. An expired running
	// attempt counts as a failure.
	takeSQL = `UPDATE {s}.runs SET status = 'running', attempt = attempt + 1, owner = $3,
		lease_until = clock_timestamp() + $6::float8 * interval '1 microsecond', not_before = NULL,
		failures = CASE WHEN status = 'running' THEN failures + 1 ELSE failures END,
		last_error = CASE WHEN status = 'running'
			THEN format('attempt %s by %s abandoned: lease expired at %s without a done mark', attempt, owner,
				to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
			ELSE last_error END,
		updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $4 AND status = $5 AND CASE status
		WHEN 'running' THEN lease_until <= clock_timestamp()
		WHEN 'failed' THEN not_before IS NULL OR not_before <= clock_timestamp()
		WHEN 'unknown' THEN $7::boolean
		ELSE false END
	RETURNING attempt, failures, last_error`

	lockRowSQL = `SELECT clock_timestamp(), ` + recordCols + ` FROM {s}.runs WHERE job = $1 AND period = $2 FOR UPDATE`

	renewSQL = `UPDATE {s}.runs SET lease_until = clock_timestamp() + $4::float8 * interval '1 microsecond', updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`

	// finishSQL: $6 is the backoff in microseconds, NULL for none.
	finishSQL = `UPDATE {s}.runs SET status = $4, failures = $5,
		not_before = clock_timestamp() + $6::float8 * interval '1 microsecond',
		last_error = $7, lease_until = NULL, updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`

	// fenceSQL opens FinishTx: it checks that the attempt still holds the
	// key and takes the row lock that keeps other attempts out while fn runs.
	fenceSQL = `UPDATE {s}.runs SET updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`

	advanceSQL = `INSERT INTO {s}.jobs AS j (job, cursor) VALUES ($1, $2)
	ON CONFLICT (job) DO UPDATE SET cursor = excluded.cursor WHERE j.cursor < excluded.cursor COLLATE "C"`

	resolveInsertSQL = `INSERT INTO {s}.runs(job, period, status, attempt, failures, last_error, created, updated)
	VALUES ($1, $2, $3, 0, 0, $4, clock_timestamp(), clock_timestamp())
	ON CONFLICT (job, period) DO NOTHING`
	resolveUpdateSQL = `UPDATE {s}.runs SET status = $3, failures = 0, not_before = NULL, lease_until = NULL,
		last_error = $4, updated = clock_timestamp()
	WHERE job = $1 AND period = $2`

	jobSQL         = `SELECT cursor, horizon FROM {s}.jobs WHERE job = $1`
	pruneCursorSQL = `SELECT cursor FROM {s}.jobs WHERE job = $1 FOR UPDATE`
	pruneOpenSQL   = `SELECT count(*), coalesce(min(period), '') FROM {s}.runs
	WHERE job = $1 AND period <= $2 COLLATE "C" AND status NOT IN ('done', 'skipped')`
	pruneSQL = `DELETE FROM {s}.runs
	WHERE job = $1 AND period <= $2 COLLATE "C" AND status IN ('done', 'skipped')`
	pruneJobsSQL = `INSERT INTO {s}.jobs AS j (job, horizon) VALUES ($1, $2)
	ON CONFLICT (job) DO UPDATE SET horizon = excluded.horizon WHERE j.horizon < excluded.horizon COLLATE "C"`
)

// listSQL lists records in (job, period) order; $3 is the limit, NULL for
// none.
const listSQL = `SELECT job, period, ` + recordCols + ` FROM {s}.runs
	WHERE ($1 = '' OR job = $1) AND ($2 = '' OR status = $2)
	ORDER BY job, period
	LIMIT $3`

const recordCols = `status, attempt, failures, owner, lease_until, not_before, last_error, updated`

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{s}", s)
	return queries{
		ddl: r.Replace(ddlSQL), getVersion: r.Replace(getVersionSQL), setVersion: r.Replace(setVersionSQL),
		read: r.Replace(readSQL), insert: r.Replace(insertSQL), take: r.Replace(takeSQL), lockRow: r.Replace(lockRowSQL),
		renew: r.Replace(renewSQL), finish: r.Replace(finishSQL), fence: r.Replace(fenceSQL), advance: r.Replace(advanceSQL),
		resolveInsert: r.Replace(resolveInsertSQL), resolveUpdate: r.Replace(resolveUpdateSQL),
		job: r.Replace(jobSQL), pruneCursor: r.Replace(pruneCursorSQL), pruneOpen: r.Replace(pruneOpenSQL),
		prune: r.Replace(pruneSQL), pruneJobs: r.Replace(pruneJobsSQL), list: r.Replace(listSQL),
	}
}
