package idem

// attemptsSchema is version 7's history of attempts: one row per attempt
// that ended (done, failed, unknown, parked, or abandoned: taken over
// once its lease expired, its process gone), keyed by the key, its
// revision and the attempt's number. Versions 7 and 8 write the row in the
// transaction that records the outcome; version 9 when the record moves on
// (attemptArchiveSQL), the record holding the last attempt's until then. A
// version-6 process that shares the ledger (a rolling update) writes none
// for the attempts it ends: their history simply lacks them.
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

// attemptArchiveSQL is version 9's trigger idem_attempt_archive: an
// attempt's history row is written when its record moves on, not when the
// attempt ends. An attempt that ends (done, failed, unknown, parked) leaves
// its outcome on the key's record in idem_runs (status, last_error, owner,
// started, updated: the row it would have had), and the history reads it
// from there (History); most records never change again, so most attempts
// cost their done mark alone: no second table's page in the commit. The
// row goes into idem_attempts, from the record's old values, in the
// statement that first changes a record holding an ended attempt (a retry's
// claim, a re-run's new revision, Resolve, the trigger
// idem_rerun_after_done), whoever writes it: a version-8 process sharing the
// ledger too, as the trigger is the database's. An UPDATE that sets none of
// the columns the row is made of (a RunTx's stored value) moves nothing;
// neither does the RunTx claim's own change: its row goes in done, and its fn's
// failure turns it back into attempt 1 running, in the same transaction,
// before anything sees it. An attempt's number is its key's alone, across
// revisions (each claim takes the record's attempt plus one; a re-run
// changes the revision, not the attempt), so an attempt that has a row
// already gets none more: the row a version-8 process wrote when the
// attempt ended, and the first archive of an attempt when its record
// changes again. A re-run leaves the record at the new revision with the
// old attempt's number, its row archived by that change: it holds no
// attempt until the next claim (historySQL skips it as well).
const attemptArchiveSQL = `
CREATE TRIGGER IF NOT EXISTS idem_attempt_archive
AFTER UPDATE OF status, attempt, revision, last_error, owner, started, updated ON idem_runs
WHEN OLD.status <> 'running' AND OLD.attempt > 0
	AND NOT (NEW.status = 'running' AND NEW.attempt = OLD.attempt AND NEW.revision = OLD.revision)
	AND NOT EXISTS (SELECT 1 FROM idem_attempts WHERE job = OLD.job AND period = OLD.period AND attempt = OLD.attempt)
BEGIN
	INSERT INTO idem_attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
	VALUES (OLD.job, OLD.period, OLD.revision, OLD.attempt, OLD.status, OLD.last_error, OLD.owner, OLD.started, OLD.updated)
	ON CONFLICT DO NOTHING;
END;
`

// abandonedInsertSQL records the history row of a running attempt that a
// claim takes over (its lease expired): outcome abandoned, ended when taken
// over (the first argument).
const abandonedInsertSQL = `INSERT INTO idem_attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
	SELECT job, period, revision, attempt, 'abandoned', '', owner, started, ? FROM idem_runs WHERE job=? AND period=? AND status='running'
	ON CONFLICT DO NOTHING`
