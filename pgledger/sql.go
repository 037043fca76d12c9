package pgledger

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries are the ledger's SQL statements with its schema filled in.
type queries struct {
	ddl, getVersion, setVersion, upgradeParams    string
	read, status, insert, take, lockRow           string
	insertDone                                    string // MarkFresh
	renew, finish, fence, advance                 string
	insertNewMust, statusHex                      string // ClaimFinishTx's claim, and read after a failed claim
	fenceMust, setValue                           string // the done mark first in fn's transaction (pgx), failing unless it changed the row (mustOne); fn's value after
	resolveInsert, resolveUpdate                  string
	job, pruneCursor, pruneOpen, prune, pruneJobs string
	list, start                                   string

	// items (Each)
	upgradeItems, openItems, addItems, sealItems, countItems string
	recordChunks, chunksRecorded, sealRecorded               string
	turnTaken, unlockSealed                                  string
	batchRecorded                                            string
	claimChunk, claimItems, finishChunk, fenceChunk          string
	finishChunkDone                                          string
	finishItem, fenceItem                                    string
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
-- The items of Each (version 3): the item set (one row per item, for
-- uniqueness), its chunks (claimed and marked done as a whole), their item
-- lists, and the records of the items whose attempt did not end done
-- (failed, unknown, parked; from then on they are claimed one by one).
CREATE TABLE IF NOT EXISTS {s}.item_set (
	job    text COLLATE "C" NOT NULL,
	period text COLLATE "C" NOT NULL,
	item   text COLLATE "C" NOT NULL,
	PRIMARY KEY (job, period, item)
);
CREATE TABLE IF NOT EXISTS {s}.item_chunks (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	chunk       bigint NOT NULL, -- numbered from 1 per period
	n           integer NOT NULL, -- items in the chunk
	status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done')),
	attempt     bigint NOT NULL DEFAULT 0,
	failures    integer NOT NULL DEFAULT 0,
	owner       text NOT NULL DEFAULT '',
	lease_until timestamptz,
	settled     integer NOT NULL DEFAULT 0, -- the items before this position are settled
	started     integer NOT NULL DEFAULT 0, -- the items before this position may have begun
	doubt       integer NOT NULL DEFAULT 0, -- at the last claim: the abandoned attempt's started
	updated     timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (job, period, chunk)
);
-- Of the columns a window's done marks change only status is indexed, and
-- only the last window changes it: the others' updates can be HOT (no
-- index writes).
CREATE INDEX IF NOT EXISTS item_chunks_by_status ON {s}.item_chunks (job, period, status, chunk);
-- A chunk's item ids in order, written once: kept out of the chunk's row,
-- which every window updates.
CREATE TABLE IF NOT EXISTS {s}.item_lists (
	job    text COLLATE "C" NOT NULL,
	period text COLLATE "C" NOT NULL,
	chunk  bigint NOT NULL,
	items  text[] NOT NULL,
	PRIMARY KEY (job, period, chunk)
);
-- Version 6: the digest of the AddItems batch that made the chunk, as it
-- was given, so that the same batch given again (another host generating
-- the same items in the same order) is known to add nothing without a
-- look at its items.
ALTER TABLE {s}.item_lists ADD COLUMN IF NOT EXISTS digest bytea;
CREATE INDEX IF NOT EXISTS item_lists_by_digest ON {s}.item_lists (job, period, digest) WHERE digest IS NOT NULL;
-- Version 6 too: whether the chunk's items were checked against the items
-- recorded before it. RecordItems makes chunks unchecked, with no row per
-- item in item_set; SealItems checks them all in one pass. An unchecked
-- chunk is never claimed.
ALTER TABLE {s}.item_chunks ADD COLUMN IF NOT EXISTS checked boolean NOT NULL DEFAULT true;
CREATE TABLE IF NOT EXISTS {s}.item_state (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	item        text COLLATE "C" NOT NULL,
	chunk       bigint NOT NULL DEFAULT 0, -- the chunk it left; 0 for an item recorded by version 2
	status      text NOT NULL CHECK (status IN ('pending', 'running', 'failed', 'done', 'unknown', 'parked')),
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
-- (job, period, status) for the single-item claim's one range per status
-- (and the counts); updated last, so that a range comes out oldest change
-- first and a claim reads only the rows it takes.
CREATE INDEX IF NOT EXISTS item_state_by_status ON {s}.item_state (job, period, status, updated);
CREATE TABLE IF NOT EXISTS {s}.itemsets (
	job    text COLLATE "C" NOT NULL,
	period text COLLATE "C" NOT NULL,
	sealed boolean NOT NULL DEFAULT false,
	PRIMARY KEY (job, period)
);`

	getVersionSQL = `SELECT value FROM {s}.meta WHERE name = 'schema_version'`

	// upgradeParamsSQL is version 4: a key's parameter fingerprint and its
	// stored value (idem.WithParams, idem.RunValue). Records of older
	// versions have neither.
	upgradeParamsSQL = `ALTER TABLE {s}.runs ADD COLUMN IF NOT EXISTS fingerprint text NOT NULL DEFAULT '',
		ADD COLUMN IF NOT EXISTS value bytea`
	setVersionSQL = `INSERT INTO {s}.meta AS m (name, value) VALUES ('schema_version', $1)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE m.value < excluded.value`

	// readSQL is the claim's fast path and Lookup: the key's record (if
	// any), whether the job's horizon covers the period, and the server's
	// time. It always returns one row.
	readSQL = `SELECT clock_timestamp(), r.job IS NOT NULL, coalesce(r.status, ''), coalesce(r.attempt, 0),
		coalesce(r.failures, 0), coalesce(r.owner, ''), r.lease_until, r.not_before, coalesce(r.last_error, ''), r.updated,
		coalesce(j.horizon, '') >= $2 COLLATE "C", coalesce(r.fingerprint, ''), r.value, coalesce(r.revision, 0)
	FROM (SELECT) AS one
	LEFT JOIN {s}.runs AS r ON r.job = $1 AND r.period = $2
	LEFT JOIN {s}.jobs AS j ON j.job = $1`

	// statusSQL is the claim's first read (fastClaim): what a done key's
	// answer needs, by primary key.
	statusSQL = `SELECT status, fingerprint, value FROM {s}.runs WHERE job = $1 AND period = $2`

	// statusHexSQL is statusSQL with the value in hex (read as text).
	statusHexSQL = `SELECT status, fingerprint, encode(value, 'hex') FROM {s}.runs WHERE job = $1 AND period = $2`

	// insertSQL takes a key that has no record, unless the job's horizon
	// covers it; $5 is the claim's fingerprint.
	insertSQL = `INSERT INTO {s}.runs(job, period, status, attempt, owner, lease_until, created, updated, fingerprint)
	SELECT $1, $2, 'running', 1, $3, clock_timestamp() + $4::float8 * interval '1 microsecond', clock_timestamp(), clock_timestamp(), $5
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE job = $1 AND horizon >= $2 COLLATE "C")
	ON CONFLICT (job, period) DO NOTHING
	RETURNING attempt`

	// insertNewSQL is insertSQL for ClaimFinishTx, which has not read the
	// key: it also skips a key that has a record in the statement's
	// snapshot, so that it never waits on the row of a transaction that
	// holds it (ON CONFLICT would wait for it to end).
	insertNewSQL = `INSERT INTO {s}.runs(job, period, status, attempt, owner, lease_until, created, updated, fingerprint)
	SELECT $1, $2, 'running', 1, $3, clock_timestamp() + $4::float8 * interval '1 microsecond', clock_timestamp(), clock_timestamp(), $5
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE job = $1 AND horizon >= $2 COLLATE "C")
		AND NOT EXISTS (SELECT 1 FROM {s}.runs WHERE job = $1 AND period = $2)
	ON CONFLICT (job, period) DO NOTHING`

	// insertDoneSQL is insertSQL for MarkFresh: the record is written done.
	insertDoneSQL = `INSERT INTO {s}.runs(job, period, status, attempt, owner, created, updated, fingerprint)
	SELECT $1, $2, 'done', 1, $3, clock_timestamp(), clock_timestamp(), $4
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE job = $1 AND horizon >= $2 COLLATE "C")
	ON CONFLICT (job, period) DO NOTHING`

	// setValueSQL stores the value of a done mark written before fn ran
	// (Ledger.FinishTx), in its transaction.
	setValueSQL = `UPDATE {s}.runs SET value = $4::bytea WHERE job = $1 AND period = $2 AND attempt = $3`

	// takeSQL takes a key whose record is still as the claim saw it (attempt
	// $4, status $5) and still claimable, for attempt+1. A running attempt
	// is claimable once its lease expired, or if its owner is $8 (not
	// empty): an owner whose process the claimer found gone
	// (idemstore.HolderGone). The abandoned attempt counts as a failure, and
	// its note is $9 (idemstore.NoteDied: its lease held) or $10
	// (idemstore.NoteExpired), filled in with its attempt, owner and lease
	// end. A record without a fingerprint takes the claim's, $11.
	takeSQL = `UPDATE {s}.runs SET status = 'running', attempt = attempt + 1, owner = $3,
		fingerprint = CASE WHEN fingerprint = '' THEN $11::text ELSE fingerprint END,
		lease_until = clock_timestamp() + $6::float8 * interval '1 microsecond', not_before = NULL,
		failures = CASE WHEN status = 'running' THEN failures + 1 ELSE failures END,
		last_error = CASE WHEN status = 'running'
			THEN format(CASE WHEN lease_until > clock_timestamp() THEN $9::text ELSE $10::text END, attempt, owner,
				to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
			ELSE last_error END,
		updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $4 AND status = $5 AND CASE status
		WHEN 'running' THEN lease_until <= clock_timestamp() OR ($8::text <> '' AND owner = $8::text)
		WHEN 'failed' THEN not_before IS NULL OR not_before <= clock_timestamp()
		WHEN 'unknown' THEN $7::boolean
		ELSE false END
	RETURNING attempt, failures, last_error`

	lockRowSQL = `SELECT clock_timestamp(), ` + recordCols + ` FROM {s}.runs WHERE job = $1 AND period = $2 FOR UPDATE`

	renewSQL = `UPDATE {s}.runs SET lease_until = clock_timestamp() + $4::float8 * interval '1 microsecond', updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`

	// finishSQL: $6 is the backoff in microseconds, NULL for none; $8 the
	// value stored with a done mark, NULL for none.
	finishSQL = `UPDATE {s}.runs SET status = $4, failures = $5,
		not_before = clock_timestamp() + $6::float8 * interval '1 microsecond',
		last_error = $7, lease_until = NULL, updated = clock_timestamp(), value = $8::bytea
	WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`

	// fenceSQL opens FinishTx on a *sql.DB (DBLedger; on a pool the done
	// mark itself is the fence: see pipelinedFinishTx): it checks that the attempt still holds the
	// key and takes the row lock that keeps other attempts out while fn runs.
	fenceSQL = `UPDATE {s}.runs SET updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = $3 AND status = 'running'`

	advanceSQL = `INSERT INTO {s}.jobs AS j (job, cursor) VALUES ($1, $2)
	ON CONFLICT (job) DO UPDATE SET cursor = excluded.cursor WHERE j.cursor < excluded.cursor COLLATE "C"`

	// startSQL records a job's start: its cursor, unless it has one.
	startSQL = `INSERT INTO {s}.jobs AS j (job, cursor) VALUES ($1, $2)
	ON CONFLICT (job) DO UPDATE SET cursor = excluded.cursor WHERE j.cursor = ''`

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
	// upgradeItemsSQL moves the items of a version-2 schema (one table,
	// items, a row per item with its status) into version 3's tables: every
	// item joins the item set and keeps its status as a record of its own
	// (chunk 0), so it is claimed one by one as before.
	upgradeItemsSQL = `
INSERT INTO {s}.item_set (job, period, item) SELECT job, period, item FROM {s}.items
ON CONFLICT (job, period, item) DO NOTHING;
INSERT INTO {s}.item_state (job, period, item, chunk, status, attempt, failures, doubt, owner, lease_until, not_before, last_error, updated)
SELECT job, period, item, 0, status, attempt, failures, doubt, owner, lease_until, not_before, last_error, updated FROM {s}.items
ON CONFLICT (job, period, item) DO NOTHING;
DROP TABLE {s}.items;`

	// openItemsSQL opens AddItems: it creates the period's itemsets row if
	// needed and locks it until the transaction ends, without writing it
	// (ON CONFLICT DO UPDATE locks the conflicting row even when its WHERE
	// is false). Concurrent AddItems of a period, and SealItems, wait for
	// each other there, so that two never number a chunk alike.
	openItemsSQL = `INSERT INTO {s}.itemsets AS st (job, period, sealed) VALUES ($1, $2, false)
	ON CONFLICT (job, period) DO UPDATE SET sealed = st.sealed WHERE false`

	// addItemsSQL adds a batch of items, given as an array, to the item set
	// unless the set is sealed, and makes the items that were not there one
	// new chunk, in the order given (a duplicate in the batch counts once,
	// at its first place), numbered after the period's last. It runs after
	// openItemsSQL, in its transaction: it sees what the AddItems before it
	// committed.
	addItemsSQL = `WITH fresh AS (
		INSERT INTO {s}.item_set AS i (job, period, item)
		SELECT $1, $2, it FROM unnest($3::text[]) AS it
		WHERE NOT coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false)
			AND NOT EXISTS (SELECT 1 FROM {s}.item_lists WHERE job = $1 AND period = $2 AND digest = $4::bytea)
		ON CONFLICT (job, period, item) DO NOTHING
		RETURNING i.item
	), list AS (
		SELECT array_agg(it ORDER BY pos) AS items FROM (
			SELECT u.it, min(u.pos) AS pos FROM unnest($3::text[]) WITH ORDINALITY AS u(it, pos)
			WHERE u.it COLLATE "C" IN (SELECT item FROM fresh)
			GROUP BY u.it) AS f
	), chunk AS (
		INSERT INTO {s}.item_chunks (job, period, chunk, n)
		SELECT $1, $2, coalesce((SELECT max(chunk) FROM {s}.item_chunks WHERE job = $1 AND period = $2), 0) + 1,
			cardinality(list.items)
		FROM list WHERE list.items IS NOT NULL
		RETURNING chunk
	)
	INSERT INTO {s}.item_lists (job, period, chunk, items, digest)
	SELECT $1, $2, chunk.chunk, list.items, $4::bytea FROM chunk, list`

	// batchRecordedSQL: whether an AddItems batch with digest $3 made a
	// chunk of the period (so that the same batch adds nothing), or the
	// period's set is sealed (so that no batch adds anything).
	batchRecordedSQL = `SELECT EXISTS (SELECT 1 FROM {s}.item_lists WHERE job = $1 AND period = $2 AND digest = $3::bytea)
		OR coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false)`

	// recordChunksSQL (RecordItems) makes chunks of items, given as one
	// text $3 of their items joined by U+001F (itemSep; each chunk's
	// without duplicates), split once (an InitPlan) and, per
	// chunk, its bounds in it ($4 to $5, from 1) and the digest of the chunk
	// as given ($6, in hex), new unchecked chunks numbered after the
	// period's last in the order given, unless the set is sealed; a chunk
	// whose digest a chunk of the period has, or one given before it in $6,
	// is left out. Nothing goes into item_set. It runs after openItemsSQL,
	// in its transaction, and returns (as rows changed) how many chunks it
	// made.
	recordChunksSQL = `WITH given AS (
		SELECT DISTINCT ON (g.digest) g.ord, g.digest, ((SELECT string_to_array($3::text, E'\x1f')))[g.lo:g.hi] AS items
		FROM (SELECT u.ord, u.lo::integer AS lo, u.hi::integer AS hi, decode(u.h, 'hex') AS digest
			FROM unnest($4::bigint[], $5::bigint[], $6::text[]) WITH ORDINALITY AS u(lo, hi, h, ord)) AS g
		WHERE NOT coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false)
			AND NOT EXISTS (SELECT 1 FROM {s}.item_lists AS l WHERE l.job = $1 AND l.period = $2 AND l.digest = g.digest)
		ORDER BY g.digest, g.ord
	), numbered AS (
		SELECT given.items, given.digest,
			coalesce((SELECT max(chunk) FROM {s}.item_chunks WHERE job = $1 AND period = $2), 0)
				+ row_number() OVER (ORDER BY given.ord) AS chunk
		FROM given
	), chunks AS (
		INSERT INTO {s}.item_chunks (job, period, chunk, n, checked)
		SELECT $1, $2, chunk, cardinality(items), false FROM numbered
	)
	INSERT INTO {s}.item_lists (job, period, chunk, items, digest)
	SELECT $1, $2, chunk, items, digest FROM numbered`

	// sealItemsSQL checks the period's unchecked chunks (RecordItems') and
	// seals the set, unless it is sealed already. It runs after
	// openItemsSQL, in its transaction: it sees every chunk committed
	// before, and none is added until it commits. Every item of the period
	// is an occurrence: (chunk, position) in the item lists, and (0, 0) for
	// a row of item_set (an item that AddItems, or a version-2 schema,
	// recorded); of an item that occurs more than once, every occurrence
	// after its first in an unchecked chunk is removed from that chunk's
	// list (the checked chunks were checked against everything before them
	// already). One pass over the set: a hash aggregate finds the items that
	// occur twice; only theirs are sorted. A chunk left with no item is
	// done. The checked chunks become claimable.
	// chunksRecordedSQL (RecordItems): whether the period's set is sealed,
	// and which of the digests $3 (in hex: any driver sends and reads a
	// text array) chunks of the period have.
	chunksRecordedSQL = `SELECT coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false),
		ARRAY(SELECT encode(digest, 'hex') FROM {s}.item_lists WHERE job = $1 AND period = $2
			AND digest = ANY (ARRAY(SELECT decode(h, 'hex') FROM unnest($3::text[]) AS h)))`

	// turnTakenSQL, for a turn just taken (RecordTurn): whether the
	// period's item set is sealed, and whether the period has no chunk yet;
	// when the set is sealed, it also gives back the turn's advisory lock $3
	// (and says whether it held it): a caller that waited for the turn and
	// finds the set sealed needs nothing more.
	turnTakenSQL = `SELECT s.sealed, s.alone, CASE WHEN s.sealed THEN pg_advisory_unlock($3) ELSE false END
	FROM (SELECT coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false) AS sealed,
		NOT EXISTS (SELECT 1 FROM {s}.item_chunks WHERE job = $1 AND period = $2) AS alone) AS s`

	// sealRecordedSQL seals the set of a turn (RecordTurn) that made $3
	// chunks, each item in one of them once, when the period holds those
	// chunks alone (no other chunk, no item of AddItems): it marks them
	// checked without reading their items, and returns true. Otherwise it
	// writes nothing and returns false, and the turn seals with
	// sealItemsSQL. It runs after openItemsSQL, in its transaction.
	sealRecordedSQL = `WITH ok AS (
		SELECT NOT coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false)
			AND (SELECT count(*) FROM {s}.item_chunks WHERE job = $1 AND period = $2) = $3::bigint
			AND NOT EXISTS (SELECT 1 FROM {s}.item_set WHERE job = $1 AND period = $2) AS ok
	), checked AS (
		UPDATE {s}.item_chunks AS c SET checked = true FROM ok
		WHERE ok.ok AND c.job = $1 AND c.period = $2 AND NOT c.checked
		RETURNING c.chunk
	), sealed AS (
		UPDATE {s}.itemsets AS st SET sealed = true FROM ok
		WHERE ok.ok AND st.job = $1 AND st.period = $2
		RETURNING st.job
	)
	SELECT ok FROM ok`

	// unlockSealedSQL gives back a turn's advisory lock $1 if the period's
	// set is sealed; it returns whether it did.
	unlockSealedSQL = `SELECT coalesce((SELECT pg_advisory_unlock($1) FROM {s}.itemsets
		WHERE job = $2 AND period = $3 AND sealed), false)`

	sealItemsSQL = `WITH fresh AS (
		SELECT chunk FROM {s}.item_chunks WHERE job = $1 AND period = $2 AND NOT checked
			AND NOT coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false)
	), occ AS (
		SELECT l.chunk, u.it COLLATE "C" AS it, u.pos FROM {s}.item_lists AS l, unnest(l.items) WITH ORDINALITY AS u(it, pos)
		WHERE l.job = $1 AND l.period = $2 AND EXISTS (SELECT FROM fresh)
		UNION ALL
		SELECT 0, i.item, 0 FROM {s}.item_set AS i
		WHERE i.job = $1 AND i.period = $2 AND EXISTS (SELECT FROM fresh)
	), dup AS (
		SELECT it FROM occ GROUP BY it HAVING count(*) > 1
	), later AS (
		SELECT o.chunk, array_agg(o.pos) AS pos FROM (
			SELECT o.chunk, o.pos, row_number() OVER (PARTITION BY o.it ORDER BY o.chunk, o.pos) AS rn
			FROM occ AS o WHERE o.it IN (SELECT it FROM dup)) AS o
		WHERE o.rn > 1 AND o.chunk IN (SELECT chunk FROM fresh)
		GROUP BY o.chunk
	), lists AS (
		UPDATE {s}.item_lists AS l
		SET items = ARRAY(SELECT x.it FROM unnest(l.items) WITH ORDINALITY AS x(it, p) WHERE x.p <> ALL (later.pos) ORDER BY x.p)
		FROM later WHERE l.job = $1 AND l.period = $2 AND l.chunk = later.chunk
		RETURNING l.chunk, cardinality(l.items) AS n
	), checked AS (
		UPDATE {s}.item_chunks AS c SET checked = true, n = coalesce(lists.n, c.n),
			status = CASE WHEN coalesce(lists.n, c.n) = 0 THEN 'done' ELSE c.status END
		FROM fresh LEFT JOIN lists ON lists.chunk = fresh.chunk
		WHERE c.job = $1 AND c.period = $2 AND c.chunk = fresh.chunk
		RETURNING c.chunk
	)
	INSERT INTO {s}.itemsets AS st (job, period, sealed) VALUES ($1, $2, true)
	ON CONFLICT (job, period) DO UPDATE SET sealed = true WHERE NOT st.sealed`

	// countItemsSQL: one pass over the period's chunks (an item of a chunk
	// counts as the chunk's status until the chunk settles it; a running
	// chunk with nothing marked started past its settled items was handed
	// back by a deferred call: pending), one over its records (a failed one
	// that never failed was handed back: pending; those of items that left
	// a chunk were counted as settled there: from_chunks), and the server's
	// time, to express the earliest backoff deadline on the caller's clock.
	countItemsSQL = `SELECT
		coalesce((SELECT sealed FROM {s}.itemsets WHERE job = $1 AND period = $2), false),
		c.pending, c.running, c.settled,
		r.pending, r.running, r.failed, r.done, r.unknown, r.parked, r.from_chunks, r.next_retry,
		clock_timestamp()
	FROM (SELECT
			coalesce(sum(n - settled) FILTER (WHERE status = 'pending' OR status = 'running' AND started <= settled), 0) AS pending,
			coalesce(sum(n - settled) FILTER (WHERE status = 'running' AND started > settled), 0) AS running,
			coalesce(sum(settled), 0) AS settled
		FROM {s}.item_chunks WHERE job = $1 AND period = $2) AS c,
		(SELECT
			count(*) FILTER (WHERE status = 'pending' OR status = 'failed' AND failures = 0) AS pending,
			count(*) FILTER (WHERE status = 'running') AS running,
			count(*) FILTER (WHERE status = 'failed' AND failures > 0) AS failed,
			count(*) FILTER (WHERE status = 'done') AS done,
			count(*) FILTER (WHERE status = 'unknown') AS unknown,
			count(*) FILTER (WHERE status = 'parked') AS parked,
			count(*) FILTER (WHERE chunk > 0) AS from_chunks,
			min(not_before) FILTER (WHERE status = 'failed' AND failures > 0) AS next_retry
		FROM {s}.item_state WHERE job = $1 AND period = $2) AS r`

	// claimChunkSQL takes one runnable chunk: pending and checked (the first
	// added; RecordItems' chunks are checked when the set is sealed), or
	// running with an expired lease or held by an owner of $6 (owners whose
	// processes the claimer found gone: idemstore.HolderGone; checked again on
	// the locked row, so that two claimers never both take a chunk over),
	// whose abandoned attempt counts as a
	// failure and whose started items are in doubt (doubt = its started
	// mark, which never moves back). It marks the next $5 unsettled items
	// started and returns the chunk's unsettled items, in order, as one
	// text joined by U+001F (itemSep; '' for none). The
	// selection is built as in claimItemsSQL: one range of
	// item_chunks_by_status per status, FOR UPDATE SKIP LOCKED (a chunk
	// another claimer is taking, or a FinishItemsTx holds, is passed over),
	// and a TID scan of the locked row. It always returns one row: chunk 0
	// (and no items) when it took none, and then also whether the period
	// has single items that a claim may find (claimItemsSQL: pending,
	// failed, running or unknown records) and the owners of its running
	// chunks and items whose leases hold (for ClaimItems to check whether
	// their processes are gone), read by the statement's snapshot.
	claimChunkSQL = `WITH claimed AS (UPDATE {s}.item_chunks AS c SET
		doubt = CASE WHEN c.status = 'running' THEN c.started ELSE 0 END,
		failures = c.failures + CASE WHEN c.status = 'running' THEN 1 ELSE 0 END,
		status = 'running', attempt = c.attempt + 1, owner = $3,
		lease_until = clock_timestamp() + $4::float8 * interval '1 microsecond',
		started = GREATEST(c.started, LEAST(c.settled + $5::integer, c.n)),
		updated = clock_timestamp()
	WHERE c.ctid = ANY (ARRAY(SELECT ctid FROM (
		SELECT ctid FROM (SELECT ctid FROM {s}.item_chunks
			WHERE job = $1 AND period = $2 AND status = 'pending' AND checked
			ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED) AS pending
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.item_chunks
			WHERE job = $1 AND period = $2 AND status = 'running' AND lease_until <= clock_timestamp()
			ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED) AS expired
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.item_chunks
			WHERE job = $1 AND period = $2 AND status = 'running' AND owner = ANY ($6::text[])
			ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED) AS gone
		) AS runnable LIMIT 1))
	RETURNING c.chunk, c.attempt, c.n, c.settled, c.doubt, c.failures,
		(SELECT array_to_string(l.items[c.settled + 1:], E'\x1f') FROM {s}.item_lists AS l
			WHERE l.job = c.job AND l.period = c.period AND l.chunk = c.chunk) AS items)
	SELECT coalesce(c.chunk, 0), coalesce(c.attempt, 0), coalesce(c.n, 0), coalesce(c.settled, 0), coalesce(c.doubt, 0),
		coalesce(c.failures, 0), coalesce(c.items, ''),
		c.chunk IS NULL AND EXISTS (SELECT 1 FROM {s}.item_state
			WHERE job = $1 AND period = $2 AND status IN ('pending', 'failed', 'running', 'unknown')),
		CASE WHEN c.chunk IS NULL THEN ARRAY(` + runningOwnersSQL + `) ELSE '{}'::text[] END
	FROM (SELECT) AS one LEFT JOIN claimed AS c ON true`

	// claimItemsSQL takes up to $5 runnable single items (items with a
	// record of their own): pending, failed and due, running with an expired
	// lease or held by an owner of $7 (owners whose processes the claimer
	// found gone), unknown if $6; the note of an abandoned attempt is $8
	// (idemstore.NoteDied) or $9 (idemstore.NoteExpired), as in takeSQL.
	// Each status is its own branch: one range of
	// item_state_by_status, oldest change first, locked with SKIP LOCKED
	// (rows another claimer is taking are passed over, not waited for). The
	// branches run in turn, only until $5 rows are found, so a claim reads
	// about the rows it takes however large the period. (An OR of the
	// statuses in one scan would walk the period's done items on every
	// claim; so would the primary key's range filtered by status, which
	// ORDER BY item would make as cheap as item_state_by_status in the
	// planner's eyes whenever the statistics say that most items are
	// pending.) A row that another transaction changed since the statement
	// began is checked again, in its new version, before it is locked.
	//
	// The selection is an uncorrelated ARRAY(...) of the locked rows' ctids,
	// computed once; the UPDATE then fetches exactly those rows (a TID scan),
	// whatever the statistics say. (Joined to item_state by key instead, the
	// selection was scanned once per row of the period, or the period was
	// scanned and filtered, when the period was too new for the statistics:
	// up to a second per claim at 10k items; any condition on job or period
	// here makes such a scan a candidate again.) Only rows this statement
	// locked are updated: a locked row cannot change, or move, before the
	// statement's transaction ends; one that a concurrent transaction had
	// changed just before the lock is not visible to the UPDATE's snapshot
	// and is left out (a claim may take fewer items than it could, never one
	// it should not). Times are the server's: clock_timestamp().
	claimItemsSQL = `UPDATE {s}.item_state AS i SET
		doubt = i.status IN ('running', 'unknown'),
		failures = i.failures + CASE WHEN i.status = 'running' THEN 1 ELSE 0 END,
		last_error = CASE WHEN i.status = 'running'
			THEN format(CASE WHEN i.lease_until > clock_timestamp() THEN $8::text ELSE $9::text END, i.attempt, i.owner,
				to_char(i.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
			ELSE i.last_error END,
		status = 'running', attempt = i.attempt + 1, owner = $3,
		lease_until = clock_timestamp() + $4::float8 * interval '1 microsecond', not_before = NULL,
		updated = clock_timestamp()
	WHERE i.ctid = ANY (ARRAY(SELECT ctid FROM (
		SELECT ctid FROM (SELECT ctid FROM {s}.item_state
			WHERE job = $1 AND period = $2 AND status = 'pending'
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS pending
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.item_state
			WHERE job = $1 AND period = $2 AND status = 'failed' AND (not_before IS NULL OR not_before <= clock_timestamp())
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS failed
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.item_state
			WHERE job = $1 AND period = $2 AND status = 'running' AND lease_until <= clock_timestamp()
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS expired
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.item_state
			WHERE job = $1 AND period = $2 AND status = 'running' AND lease_until > clock_timestamp() AND owner = ANY ($7::text[])
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS gone
		UNION ALL
		SELECT ctid FROM (SELECT ctid FROM {s}.item_state
			WHERE $6::boolean AND job = $1 AND period = $2 AND status = 'unknown'
			ORDER BY updated LIMIT $5 FOR UPDATE SKIP LOCKED) AS unknown
		) AS runnable LIMIT $5))
	RETURNING i.item, i.attempt, i.failures, i.doubt`

	// runningOwnersSQL lists the owners of a period's running chunks and
	// items whose leases hold (in claimChunkSQL).
	runningOwnersSQL = `SELECT owner FROM {s}.item_chunks
		WHERE job = $1 AND period = $2 AND status = 'running' AND lease_until > clock_timestamp()
	UNION
	SELECT owner FROM {s}.item_state
		WHERE job = $1 AND period = $2 AND status = 'running' AND lease_until > clock_timestamp()`

	// finishChunkSQL moves a chunk forward by a window of ends, fenced by
	// its attempt and settled position: the settled position to $5, the
	// started mark to at least $5 + $6 (at most n), the lease to the
	// server's time plus $7 microseconds; done once all is settled. Only if
	// it moved, the window's items that did not end done get records of
	// their own ($9 to $14: item, status, attempt, failures, backoff in
	// microseconds or NULL, error). It returns how many chunk rows and
	// records it wrote: 0 rows means the attempt no longer holds the chunk,
	// and nothing was written.
	finishChunkSQL = `WITH moved AS (
		UPDATE {s}.item_chunks SET settled = $5::integer, started = GREATEST(started, LEAST($5::integer + $6::integer, n)),
			lease_until = clock_timestamp() + $7::float8 * interval '1 microsecond',
			status = CASE WHEN $5::integer >= n THEN 'done' ELSE 'running' END,
			updated = clock_timestamp()
		WHERE job = $1 AND period = $2 AND chunk = $3 AND attempt = $4 AND status = 'running' AND settled = $8::integer
		RETURNING chunk
	), recorded AS (
		INSERT INTO {s}.item_state (job, period, item, chunk, status, attempt, failures, not_before, last_error)
		SELECT $1, $2, e.item, $3, e.status, e.attempt, e.failures,
			clock_timestamp() + e.backoff * interval '1 microsecond', e.error
		FROM unnest($9::text[], $10::text[], $11::bigint[], $12::integer[], $13::float8[], $14::text[])
			AS e(item, status, attempt, failures, backoff, error)
		WHERE EXISTS (SELECT FROM moved)
		RETURNING item
	)
	SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM recorded)`

	// finishChunkDoneSQL is finishChunkSQL for a window whose items all
	// ended done: the chunk's UPDATE alone.
	finishChunkDoneSQL = `UPDATE {s}.item_chunks SET settled = $5::integer, started = GREATEST(started, LEAST($5::integer + $6::integer, n)),
		lease_until = clock_timestamp() + $7::float8 * interval '1 microsecond',
		status = CASE WHEN $5::integer >= n THEN 'done' ELSE 'running' END,
		updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND chunk = $3 AND attempt = $4 AND status = 'running' AND settled = $8::integer`

	// fenceChunkSQL opens FinishItemsTx for a chunk: it checks that the
	// attempt still holds the chunk at the window's position, and locks its
	// row until the transaction ends (a claimer passes it over; a stale
	// finisher waits, then finds it changed).
	fenceChunkSQL = `UPDATE {s}.item_chunks SET updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND chunk = $3 AND attempt = $4 AND status = 'running' AND settled = $5`

	// finishItemSQL ends one single item's attempt, fenced by its attempt;
	// $7 is the backoff in microseconds, NULL for none. It is sent once per
	// item, in a batch: an equality on the whole primary key is planned as
	// one index lookup whatever the statistics say, which a join with an
	// array of items is not.
	finishItemSQL = `UPDATE {s}.item_state SET status = $5, failures = $6,
		not_before = clock_timestamp() + $7::float8 * interval '1 microsecond',
		last_error = $8, doubt = false, lease_until = NULL, updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND item = $3 AND attempt = $4 AND status = 'running'`

	// fenceItemSQL opens FinishItemsTx for single items, per item: it checks
	// that the attempt still holds the item, and locks its row until the
	// transaction ends (a claimer passes it over; a stale finisher waits,
	// then finds it changed).
	fenceItemSQL = `UPDATE {s}.item_state SET updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND item = $3 AND attempt = $4 AND status = 'running'`
)

// syncOffSQL makes the transaction's commit not wait for its WAL flush
// (SET LOCAL synchronous_commit = off, as a function: it also holds for the
// implicit transaction of a batch), and says so to the trigger
// durable_commit (idem.async_commit), which otherwise raises it to on (see
// durableFuncSQL). Every syncOff statement sets both.
const syncOffSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('idem.async_commit', 'on', true)`

// genericPlanSQL has the transaction's statements run with their prepared
// statement's generic plan (plan_cache_mode), planned once per
// connection: the item statements it comes before are complex to plan,
// and their plans do not depend on their arguments (TestClaimChunkPlan,
// TestClaimItemsPlan check both kinds).
const genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// syncOffGenericSQL is syncOffSQL and genericPlanSQL in one statement.
const syncOffGenericSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('idem.async_commit', 'on', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// syncOffLockSharedSQL is syncOffSQL and lockSharedSQL in one statement
// (ClaimFinishTx, a claim's INSERT).
const syncOffLockSharedSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('idem.async_commit', 'on', true), pg_advisory_xact_lock_shared($1)`

// lockWaitSharedSQL is lockSharedSQL with lock_timeout set to insertWait
// for the rest of the transaction (the claim's INSERT sent before any
// read); syncOffLockWaitSharedSQL is it and syncOffSQL.
const (
	lockWaitSharedSQL        = `SELECT set_config('lock_timeout', '` + insertWait + `', true), pg_advisory_xact_lock_shared($1)`
	syncOffLockWaitSharedSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('idem.async_commit', 'on', true), set_config('lock_timeout', '` + insertWait + `', true), pg_advisory_xact_lock_shared($1)`
)

// recordTurnSQL takes a period's turn to record its items (RecordTurn):
// its advisory lock $2, for the session, waiting at most $1 milliseconds
// for it (lock_timeout, set for the statement's transaction alone); the
// statement after it runs with its generic plan (see genericPlanSQL).
const recordTurnSQL = `SELECT set_config('lock_timeout', $1, true), set_config('plan_cache_mode', 'force_generic_plan', true), pg_advisory_lock($2)`

// lockSharedSQL takes a job's advisory lock, shared, until the transaction
// ends (Prune takes it exclusively).
const lockSharedSQL = `SELECT pg_advisory_xact_lock_shared($1)`

// recordCols are the columns of runs that make an idemstore.Record, in
// the order every scan of them takes.
const recordCols = `status, attempt, failures, owner, lease_until, not_before, last_error, updated, fingerprint, value, revision`

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{s}", s)
	return queries{
		ddl: r.Replace(ddlSQL), getVersion: r.Replace(getVersionSQL), setVersion: r.Replace(setVersionSQL),
		upgradeParams: r.Replace(upgradeParamsSQL), read: r.Replace(readSQL), status: r.Replace(statusSQL), insert: r.Replace(insertSQL), insertDone: r.Replace(insertDoneSQL), take: r.Replace(takeSQL), lockRow: r.Replace(lockRowSQL),
		renew: r.Replace(renewSQL), finish: r.Replace(finishSQL), insertNewMust: mustOne(r.Replace(insertNewSQL), "claim"), statusHex: r.Replace(statusHexSQL), fenceMust: mustOne(r.Replace(finishSQL), "fence"), setValue: r.Replace(setValueSQL), fence: r.Replace(fenceSQL), advance: r.Replace(advanceSQL),
		resolveInsert: r.Replace(resolveInsertSQL), resolveUpdate: r.Replace(resolveUpdateSQL),
		job: r.Replace(jobSQL), pruneCursor: r.Replace(pruneCursorSQL), pruneOpen: r.Replace(pruneOpenSQL),
		prune: r.Replace(pruneSQL), pruneJobs: r.Replace(pruneJobsSQL), list: r.Replace(listSQL), start: r.Replace(startSQL),
		upgradeItems: r.Replace(upgradeItemsSQL), openItems: r.Replace(openItemsSQL), addItems: r.Replace(addItemsSQL), recordChunks: r.Replace(recordChunksSQL), chunksRecorded: r.Replace(chunksRecordedSQL), turnTaken: r.Replace(turnTakenSQL), sealRecorded: r.Replace(sealRecordedSQL), unlockSealed: r.Replace(unlockSealedSQL), batchRecorded: r.Replace(batchRecordedSQL),
		sealItems: r.Replace(sealItemsSQL), countItems: r.Replace(countItemsSQL),
		claimChunk: r.Replace(claimChunkSQL), claimItems: r.Replace(claimItemsSQL),
		finishChunk: r.Replace(finishChunkSQL), finishChunkDone: r.Replace(finishChunkDoneSQL), fenceChunk: r.Replace(fenceChunkSQL),
		finishItem: r.Replace(finishItemSQL), fenceItem: r.Replace(fenceItemSQL),
	}
}
