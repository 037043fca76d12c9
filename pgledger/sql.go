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

	// items (Each)
	addItems, sealItems, countItems, claimItems string
	finishItem, fenceItem                       string
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
);
-- Version 2: the items of Each.
CREATE TABLE IF NOT EXISTS {s}.items (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	item        text COLLATE "C" NOT NULL,
	status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'failed', 'done', 'unknown', 'parked')),
	attempt     bigint NOT NULL DEFAULT 0,
	failures    integer NOT NULL DEFAULT 0,
	doubt       boolean NOT NULL DEFAULT false,
	owner       text NOT NULL DEFAULT '',
	lease_until timestamptz,
	not_before  timestamptz,
	last_error  text NOT NULL DEFAULT '',
	updated     timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (job, period, item)
);
-- (job, period, status) for the claims' one range per status (and the
-- counts); updated last, so that a range comes out oldest change first and a
-- claim reads only the rows it takes.
CREATE INDEX IF NOT EXISTS items_by_status ON {s}.items (job, period, status, updated);
CREATE TABLE IF NOT EXISTS {s}.itemsets (
	job    text COLLATE "C" NOT NULL,
	period text COLLATE "C" NOT NULL,
	sealed boolean NOT NULL DEFAULT false,
	PRIMARY KEY (job, period)
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

// The items of Each.
const (
	// addItemsSQL adds a batch of items, given as an array.
	addItemsSQL = `INSERT INTO {s}.items (job, period, item)
	SELECT $1, $2, it FROM unnest($3::text[]) AS it
	ON CONFLICT (job, period, item) DO NOTHING`

	sealItemsSQL = `INSERT INTO {s}.itemsets AS st (job, period, sealed) VALUES ($1, $2, true)
	ON CONFLICT (job, period) DO UPDATE SET sealed = true WHERE NOT st.sealed`

	// countItemsSQL: one pass over the period's rows for the counts; the
	// earliest backoff deadline from the failed range only; the server's
	// time, to express it on the caller's clock.
	countItemsSQL = `SELECT
		coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false),
		count(*) FILTER (WHERE status = 'pending'),
		count(*) FILTER (WHERE status = 'running'),
		count(*) FILTER (WHERE status = 'failed'),
		count(*) FILTER (WHERE status = 'done'),
		count(*) FILTER (WHERE status = 'unknown'),
		count(*) FILTER (WHERE status = 'parked'),
		(SELECT min(not_before) FROM {s}.items WHERE job = $1 AND period = $2 AND status = 'failed'),
		clock_timestamp()
	FROM {s}.items WHERE job = $1 AND period = $2`

	// claimItemsSQL takes up to $5 runnable items. Each status is its own
	// branch: one range of items_by_status, oldest change first, locked
	// with SKIP LOCKED (rows another claimer is taking are passed over, not
	// waited for). The branches run in turn, only until $5 rows are found, so
	// a claim reads about the rows it takes however large the period. (An
	// OR of the statuses in one scan would walk the period's done items on
	// every claim; so would the primary key's range filtered by status,
	// which ORDER BY item would make as cheap as items_by_status in the
	// planner's eyes whenever the statistics say that most items are
	// pending.) A row that another transaction changed since the statement
	// began is checked again, in its new version, before it is locked.
	//
	// The selection is an uncorrelated ARRAY(...) of the locked rows' ctids,
	// computed once; the UPDATE then fetches exactly those rows (a TID scan),
	// whatever the statistics say. (Joined to items by key instead, the
	// selection was scanned once per row of the period, or the period was
	// scanned and filtered, when the period was too new for the statistics:
	// up to a second per claim at 10k items; any condition on job or period
	// here makes such a scan a candidate again.) Only rows this statement
	// locked are updated: a locked row cannot change, or move, before the
	// statement's transaction ends; one that a concurrent transaction had
	// changed just before the lock is not visible to the UPDATE's snapshot
	// and is left out (a claim may take fewer items than it could, never one
	// it should not). Times are the server's: clock_timestamp().
	claimItemsSQL = `UPDATE {s}.items AS i SET
		doubt = i.status IN ('running', 'unknown'),
		failures = i.failures + CASE WHEN i.status = 'running' THEN 1 ELSE 0 END,
		last_error = CASE WHEN i.status = 'running'
			THEN format('attempt %s by %s abandoned: lease expired at %s without a done mark', i.attempt, i.owner,
				to_char(i.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
			ELSE i.last_error END,
		status = 'running', attempt = i.attempt + 1, owner = $3,
		lease_until = clock_timestamp() + $4::float8 * interval '1 microsecond', not_before = NULL,
		updated = clock_timestamp()
	WHERE i.ctid = ANY (ARRAY(SELECT ctid FROM (
		SELECT ctid FROM (SELECT ctid FROM {s}.items
			WHERE job = $1 AND period = $2 AND status = 'pending'
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS pending
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.items
			WHERE job = $1 AND period = $2 AND status = 'failed' AND (not_before IS NULL OR not_before <= clock_timestamp())
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS failed
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.items
			WHERE job = $1 AND period = $2 AND status = 'running' AND lease_until <= clock_timestamp()
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS expired
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.items
			WHERE $6::boolean AND job = $1 AND period = $2 AND status = 'unknown'
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS unknown
		) AS runnable LIMIT $5))
	RETURNING i.item, i.attempt, i.failures, i.doubt`

	// finishItemSQL ends one item attempt, fenced by its attempt; $7 is the
	// backoff in microseconds, NULL for none. It is sent once per item, in a
	// batch: an equality on the whole primary key is planned as one index
	// lookup whatever the statistics say, which a join with an array of
	// items is not.
	finishItemSQL = `UPDATE {s}.items SET status = $5, failures = $6,
		not_before = clock_timestamp() + $7::float8 * interval '1 microsecond',
		last_error = $8, doubt = false, lease_until = NULL, updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND item = $3 AND attempt = $4 AND status = 'running'`

	// fenceItemSQL opens FinishItemsTx, per item: it checks that the attempt
	// still holds the item, and locks its row until the transaction ends (a
	// claimer passes it over; a stale finisher waits, then finds it changed).
	fenceItemSQL = `UPDATE {s}.items SET updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND item = $3 AND attempt = $4 AND status = 'running'`
)

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
		addItems: r.Replace(addItemsSQL), sealItems: r.Replace(sealItemsSQL), countItems: r.Replace(countItemsSQL),
		claimItems: r.Replace(claimItemsSQL), finishItem: r.Replace(finishItemSQL), fenceItem: r.Replace(fenceItemSQL),
	}
}
