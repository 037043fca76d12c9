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
// its done mark makes the revision, see promoteRerunSQL).
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
		for _, key := range req.Keys {
			o, err := rerunKey(tx, key, req, now)
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

// rerunKey applies req to key in tx (see idemstore.Rerunner).
func rerunKey(tx *wtx, key Key, req idemstore.RerunRequest, now int64) (idemstore.RerunOutcome, error) {
	o := idemstore.RerunOutcome{Key: key}
	var seen int64
	err := tx.queryRow(`SELECT revision FROM idem_reruns WHERE job=? AND period=? AND request_id=?`, key.Job, key.Period, req.RequestID).Scan(&seen)
	switch {
	case err == nil:
		// Sent before. If it waited for an attempt that a process of the
		// previous release ended done (which knows no requests), it is
		// made now.
		if err := promoteRerun(tx, key); err != nil {
			return o, err
		}
		o.State, o.Revision = idemstore.RerunSeen, seen
		return o, nil
	case !errors.Is(err, sql.ErrNoRows):
		return o, err
	}
	rec, found, err := scanRecord(key, tx.queryRow(selectRecord, key.Job, key.Period))
	if err != nil {
		return o, err
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

// promoteRerun gives key, if it is done, the revision of the re-run
// requests that waited for its attempt to end (state pending), if any. A
// key that is not done keeps them pending: a request sent again while the
// attempt runs still waits for its done mark.
func promoteRerun(tx *wtx, key Key) error {
	var revision int64
	var reason, by, id string
	err := tx.queryRow(`SELECT revision, reason, by_whom, request_id FROM idem_reruns WHERE job=? AND period=? AND state='pending'
		AND EXISTS (SELECT 1 FROM idem_runs WHERE job=? AND period=? AND status='done')
		ORDER BY requested LIMIT 1`, key.Job, key.Period, key.Job, key.Period).Scan(&revision, &reason, &by, &id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	note := idemstore.RerunNote(idemstore.RerunRequest{RequestID: id, Reason: reason, By: by}, revision)
	if _, err := tx.exec(`UPDATE idem_runs SET status='failed', revision=?, failures=0, not_before=0, last_error=?
		WHERE job=? AND period=? AND status='done' AND revision < ?`, revision, note, key.Job, key.Period, revision); err != nil {
		return err
	}
	if _, err = tx.exec(`UPDATE idem_reruns SET state='queued' WHERE job=? AND period=? AND state='pending'`, key.Job, key.Period); err != nil {
		return err
	}
	return wakeJob(tx, key.Job) // the re-run is due now: the Schedulers look at once
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
