package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// rerunsSchema is version 8's record of re-run requests (Rerun): one row
// per request and period, keyed by the request's id so that the same
// request sent again changes nothing. state is queued (the period has the
// revision) or pending (an attempt held the period when the request came:
// its done mark makes the revision).
//
// The trigger idem_rerun_after_done makes it: when a record's status
// becomes done and the period has pending requests, the record becomes
// their revision (failed, runnable at once, as Rerun makes a done period:
// failures and not_before 0, last_error idemstore.RerunNote's text) and
// the requests become queued (they share that revision). It is the
// schema's, so every done mark promotes, in its own transaction, whoever
// writes it (Finish, FinishTx, Resolve, a process of the release before).
// The promotion also writes the job's wake mark (wakeJob's rows): the
// re-run is due now, and the Schedulers look at once.
// Its WHEN clause makes a done mark that finds no pending request cost one
// lookup of idem_reruns' primary key, inside SQLite. The record's update
// moves its counts (idem_runs_count_update fires for it: a nested trigger,
// not a recursive one) and ends no attempt, so it adds no history row.
const rerunsSchema = `
CREATE TABLE IF NOT EXISTS idem_reruns (
	job        TEXT    NOT NULL,
	period     TEXT    NOT NULL,
	request_id TEXT    NOT NULL,
	revision   INTEGER NOT NULL,
	state      TEXT    NOT NULL, -- queued, pending
	reason     TEXT    NOT NULL,
	by_whom    TEXT    NOT NULL DEFAULT '',
	requested  INTEGER NOT NULL, -- µs
	PRIMARY KEY (job, period, request_id)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS idem_rerun_after_done AFTER UPDATE OF status ON idem_runs
WHEN NEW.status = 'done' AND EXISTS (SELECT 1 FROM idem_reruns WHERE job = NEW.job AND period = NEW.period AND state = 'pending')
BEGIN
	UPDATE idem_runs SET status = 'failed', failures = 0, not_before = 0, lease_until = 0,
		(revision, last_error) = (SELECT r.revision, 're-run requested as revision ' || r.revision || ' by ' ||
			CASE r.by_whom WHEN '' THEN '?' ELSE r.by_whom END || ' (request ' || r.request_id || '): ' || r.reason
			FROM idem_reruns AS r WHERE r.job = NEW.job AND r.period = NEW.period AND r.state = 'pending'
			ORDER BY r.requested, r.request_id LIMIT 1)
	WHERE job = NEW.job AND period = NEW.period AND status = 'done';
	UPDATE idem_reruns SET state = 'queued' WHERE job = NEW.job AND period = NEW.period AND state = 'pending';
	INSERT INTO idem_meta(name, value) VALUES('` + idemstore.WakeCounter + `', 1)
		ON CONFLICT(name) DO UPDATE SET value = value + 1;
	INSERT INTO idem_meta(name, value) SELECT '` + idemstore.WakeMarkPrefix + `' || NEW.job, value FROM idem_meta WHERE name = '` + idemstore.WakeCounter + `'
		ON CONFLICT(name) DO UPDATE SET value = excluded.value;
END;
`

var _ idemstore.Rerunner = ledgerStore{}

// Rerun implements [idemstore.Rerunner] in one durable transaction.
func (l ledgerStore) Rerun(ctx context.Context, req idemstore.RerunRequest) ([]idemstore.RerunOutcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var out []idemstore.RerunOutcome
	err := l.withTx(ctx, true, func(tx *wtx) error {
		out = out[:0]
		now := micros(tx.at(req.Now))
		sent, err := rerunSent(tx, req)
		if err != nil {
			return err
		}
		for _, key := range req.Keys {
			o, err := rerunKey(tx, key, req, now, sent)
			if err != nil {
				return err
			}
			out = append(out, o)
		}
		woken := map[string]bool{}
		for _, key := range req.Keys {
			if !woken[key.Job] {
				woken[key.Job] = true
				if err := wakeJob(tx, key.Job); err != nil { // the Schedulers look at once
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, idemstore.ErrNotRerunnable) {
			return nil, fmt.Errorf("%w (nothing was changed)", err)
		}
		return nil, fmt.Errorf("idem: %s: re-run: %w", l.where(), err)
	}
	return out, nil
}

// rerunSent reports whether req's id is recorded for one of its keys: the
// request was sent before (and applied to all its keys at once), and a
// key it did not name then is not re-run now.
func rerunSent(tx *wtx, req idemstore.RerunRequest) (bool, error) {
	for _, key := range req.Keys {
		var n int
		err := tx.queryRow(`SELECT 1 FROM idem_reruns WHERE job=? AND period=? AND request_id=?`, key.Job, key.Period, req.RequestID).Scan(&n)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
	}
	return false, nil
}

// rerunKey applies req to key in tx (see idemstore.Rerunner); sent: the
// request was sent before (rerunSent).
func rerunKey(tx *wtx, key Key, req idemstore.RerunRequest, now int64, sent bool) (idemstore.RerunOutcome, error) {
	o := idemstore.RerunOutcome{Key: key}
	var seen int64
	err := tx.queryRow(`SELECT revision FROM idem_reruns WHERE job=? AND period=? AND request_id=?`, key.Job, key.Period, req.RequestID).Scan(&seen)
	switch {
	case err == nil:
		// Sent before (a pending one is made by its attempt's done
		// mark: idem_rerun_after_done).
		o.State, o.Revision = idemstore.RerunSeen, seen
		return o, nil
	case !errors.Is(err, sql.ErrNoRows):
		return o, err
	}
	rec, found, err := scanRecord(key, tx.queryRow(selectRecord, key.Job, key.Period))
	if err != nil {
		return o, err
	}
	if sent {
		// A key the request did not name when it was first sent (its
		// dependents, computed anew: RerunWithDependents): nothing more.
		o.State, o.Revision = idemstore.RerunSeen, rec.Revision
		return o, nil
	}
	pruned := false
	if !found {
		if err := tx.queryRow(`SELECT EXISTS (SELECT 1 FROM idem_jobs WHERE job = ? AND horizon >= ?)`, key.Job, key.Period).Scan(&pruned); err != nil {
			return o, err
		}
	}
	if err := idemstore.Rerunnable(rec, found, pruned); err != nil {
		return o, err
	}
	insert := func(revision int64, state string) error {
		_, err := tx.exec(`INSERT INTO idem_reruns(job, period, request_id, revision, state, reason, by_whom, requested) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			key.Job, key.Period, req.RequestID, revision, state, req.Reason, req.By, now)
		return err
	}
	switch rec.Status {
	case StatusDone, StatusSkipped:
		o.State, o.Revision = idemstore.RerunQueued, rec.Revision+1
		if _, err := tx.exec(`UPDATE idem_runs SET status='failed', revision=?, failures=0, not_before=0, lease_until=0,
			last_error=?, updated=? WHERE job=? AND period=?`, o.Revision, idemstore.RerunNote(req, o.Revision), now, key.Job, key.Period); err != nil {
			return o, err
		}
		// A request that waited for an attempt that did not end done (it
		// failed, and the period was skipped) is answered by this
		// revision: left pending, its promotion would run it once more.
		if _, err := tx.exec(`UPDATE idem_reruns SET state='queued' WHERE job=? AND period=? AND state='pending'`, key.Job, key.Period); err != nil {
			return o, err
		}
		return o, insert(o.Revision, "queued")
	case StatusRunning:
		// More requests while it runs share one revision.
		o.State, o.Revision = idemstore.RerunAfterRun, rec.Revision+1
		return o, insert(o.Revision, "pending")
	default: // failed: it runs again anyway
		o.State, o.Revision = idemstore.RerunDue, rec.Revision
		return o, insert(o.Revision, "queued")
	}
}

// RerunsDue implements [idemstore.Rerunner].
func (l ledgerStore) RerunsDue(ctx context.Context, job, through string) ([]string, error) {
	// From the requests (few), not from the job's records (many): a
	// Scheduler asks at every look at the job.
	periods, err := queryStrings(ctx, l.db, `SELECT r.period FROM idem_runs r
		WHERE r.job = ?1 AND r.period IN (SELECT DISTINCT period FROM idem_reruns WHERE job = ?1 AND period <= ?2)
		AND r.revision > 0 AND r.status IN ('failed', 'running') ORDER BY r.period`, job, through)
	if err != nil {
		return nil, fmt.Errorf("idem: %s: re-runs due of %s: %w", l.where(), job, err)
	}
	return periods, nil
}

var _ idemstore.Historian = ledgerStore{}

// historySQL reads a key's ended attempts: the rows of idem_attempts, and
// the attempt its record holds if it ended (version 9 writes its row only
// when the record moves on: attemptArchiveSQL) and has no row (a version-8
// process wrote one when it ended; a re-run left the record at a new
// revision with an archived attempt's number). A record of attempt 0
// (Resolve of a key that had none) holds no attempt.
const historySQL = `SELECT revision, attempt, outcome, error, owner, started, ended FROM idem_attempts
	WHERE job = ?1 AND period = ?2
UNION ALL
SELECT r.revision, r.attempt, r.status, r.last_error, r.owner, r.started, r.updated FROM idem_runs AS r
	WHERE r.job = ?1 AND r.period = ?2 AND r.status <> 'running' AND r.attempt > 0
	AND NOT EXISTS (SELECT 1 FROM idem_attempts AS a WHERE a.job = r.job AND a.period = r.period AND a.attempt = r.attempt)
ORDER BY 1, 2`

// History implements [idemstore.Historian]: the key's attempts that ended
// (idem_attempts, schema version 7, and the one its record holds: see
// attemptArchiveSQL) and its re-run requests (idem_reruns), oldest first.
func (l ledgerStore) History(ctx context.Context, key Key) (idemstore.History, error) {
	var h idemstore.History
	if err := key.Validate(); err != nil {
		return h, err
	}
	fail := func(err error) (idemstore.History, error) {
		return idemstore.History{}, fmt.Errorf("idem: %s: history of %s: %w", l.where(), key, err)
	}
	rows, err := l.db.QueryContext(ctx, historySQL, key.Job, key.Period)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a idemstore.AttemptRecord
		var started, ended int64
		if err := rows.Scan(&a.Revision, &a.Attempt, &a.Outcome, &a.Error, &a.Owner, &started, &ended); err != nil {
			return fail(err)
		}
		a.Started, a.Ended = fromMicros(started), fromMicros(ended)
		h.Attempts = append(h.Attempts, a)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	rows.Close()
	rows, err = l.db.QueryContext(ctx, `SELECT request_id, revision, state, reason, by_whom, requested FROM idem_reruns
		WHERE job=? AND period=? ORDER BY requested, request_id`, key.Job, key.Period)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r idemstore.RerunRecord
		var requested int64
		if err := rows.Scan(&r.RequestID, &r.Revision, &r.State, &r.Reason, &r.By, &requested); err != nil {
			return fail(err)
		}
		r.Requested = fromMicros(requested)
		h.Reruns = append(h.Reruns, r)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return h, nil
}
