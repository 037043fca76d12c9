package idem

// attemptsSchema is version 7's history of attempts: one row per attempt
// that ended (done, failed, unknown, parked, or abandoned: taken over
// once its lease expired, its process gone), written in the transaction
// that records its outcome, keyed by the key, its revision and the
// attempt's number. A version-6 process that shares the ledger (a rolling
// update) writes none for the attempts it ends: their history simply lacks
// them.
const attemptsSchema = `
CREATE TABLE IF NOT EXISTS idem_attempts (
	job      TEXT    NOT NULL,
	period   TEXT    NOT NULL,
	revision INTEGER NOT NULL,
	attempt  INTEGER NOT NULL,
	outcome  TEXT    NOT NULL, -- done, failed, unknown, parked; abandoned: taken over after its lease expired
	error    TEXT    NOT NULL DEFAULT '',
	owner    TEXT    NOT NULL DEFAULT '',
	started  INTEGER NOT NULL DEFAULT 0, -- µs; 0 if the claim was written by version 6
	ended    INTEGER NOT NULL,
	PRIMARY KEY (job, period, revision, attempt)
) WITHOUT ROWID;
`

// runsV7Columns are the columns version 7 adds to idem_runs: the key's
// revision (0 until re-runs of done periods exist) and when its current
// attempt was claimed (µs; 0 for a claim written by version 6), which
// becomes its history row's started.
var runsV7Columns = []struct{ name, decl string }{
	{"revision", `INTEGER NOT NULL DEFAULT 0`},
	{"started", `INTEGER NOT NULL DEFAULT 0`},
}

// attemptInsertSQL records the history row of the attempt whose outcome the
// same transaction has just written to idem_runs (by job, period).
const attemptInsertSQL = `INSERT INTO idem_attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
	SELECT job, period, revision, attempt, status, last_error, owner, started, updated FROM idem_runs WHERE job=? AND period=?
	ON CONFLICT DO NOTHING`

// attemptEndSQL records the history row of the running attempt whose
// outcome (status, error, ended) the same transaction is about to write
// (by job, period and attempt: the done mark's own condition).
const attemptEndSQL = `INSERT INTO idem_attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
	SELECT job, period, revision, attempt, ?, ?, owner, started, ? FROM idem_runs WHERE job=? AND period=? AND attempt=? AND status='running'
	ON CONFLICT DO NOTHING`

// abandonedInsertSQL records the history row of a running attempt that a
// claim takes over (its lease expired): outcome abandoned, ended when taken
// over (the first argument).
const abandonedInsertSQL = `INSERT INTO idem_attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
	SELECT job, period, revision, attempt, 'abandoned', '', owner, started, ? FROM idem_runs WHERE job=? AND period=? AND status='running'
	ON CONFLICT DO NOTHING`
