package mysqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

// Re-runs of done periods (schema version 2, idem.Rerun): the table
// reruns holds one row per request and period, keyed by the request's id,
// so that the same request sent again changes nothing. Its state is
// queued (the period has the request's revision, or had it: a failed
// period's request is recorded with the revision that runs anyway) or
// pending (an attempt held the period when the request came: that
// attempt's done mark gives the period the request's revision). The
// period's revision is the column runs.revision.
//
// The promotion of pending requests is a statement of the done mark's own
// transaction (Finish, FinishTx: promoteSQL after the done mark), not a
// trigger: MySQL does not let a trigger on runs update runs. A done mark
// of mysqlledger before version 2's (a rolling update) does not promote;
// the request sent again does (Rerun), as on the SQLite ledger.
func rerunsDDL(t tables) string {
	return `CREATE TABLE IF NOT EXISTS ` + t.reruns + ` (job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL,
			request_id VARBINARY(255) NOT NULL, revision BIGINT NOT NULL,
			state VARCHAR(16) CHARACTER SET ascii NOT NULL, reason MEDIUMTEXT NOT NULL, by_whom TEXT NOT NULL,
			requested BIGINT NOT NULL, PRIMARY KEY (job, period, request_id))` + tableOpts
}

// ddlTable names the table a DDL statement of ddl() creates or alters.
func ddlTable(q string) string {
	f := strings.Fields(q)
	switch {
	case len(f) > 5 && f[0] == "CREATE":
		return f[5]
	case len(f) > 2:
		return f[2]
	}
	return q
}

// promoteSQL gives a done period the revision of its oldest pending
// request (runnable at once: status failed, no backoff, no failure
// counted, the request's note as idemstore.RerunNote writes it). Its
// parameters: job, period, job, period. A period that is not done is left
// alone: its requests stay pending for the done mark of a later attempt.
func promoteSQL(t tables) string {
	return `UPDATE ` + t.runs + ` r JOIN (SELECT revision, reason, by_whom, request_id FROM ` + t.reruns + `
		WHERE job = ? AND period = ? AND state = 'pending' ORDER BY requested, request_id LIMIT 1) q
	SET r.status = 'failed', r.revision = q.revision, r.rerun_pending = 0, r.failures = 0, r.not_before = 0, r.lease_until = 0,
		r.last_error = CONCAT('re-run requested as revision ', q.revision, ' by ', IF(q.by_whom = '', '?', q.by_whom),
			' (request ', CAST(q.request_id AS CHAR CHARACTER SET utf8mb4), '): ', q.reason)
	WHERE r.job = ? AND r.period = ? AND r.status = 'done' AND r.revision < q.revision`
}

// promote runs promoteSQL for key in tx and, if it gave the period a
// revision, marks the period's pending requests queued.
func (l *Ledger) promote(ctx context.Context, tx *sql.Tx, key idemstore.Key) error {
	res, err := tx.ExecContext(ctx, l.q.promote, key.Job, key.Period, key.Job, key.Period)
	if err != nil {
		return fmt.Errorf("re-run after the done mark: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE `+l.t.reruns+` SET state = 'queued' WHERE job = ? AND period = ? AND state = 'pending'`,
		key.Job, key.Period)
	return err
}

var _ idemstore.Rerunner = (*Ledger)(nil)

// Rerun implements [idemstore.Rerunner] in one READ COMMITTED
// transaction: every key of req gets its new revision or its pending
// request, or, if one of them cannot be re-run ([idemstore.Rerunnable]),
// none does. Each key's row is locked (FOR UPDATE) while it is decided on,
// and its job's row shared, as a claim does: Prune waits. Times are the
// server's: req.Now is ignored. A pending request is promoted by the
// attempt's done mark, in its transaction.
func (l *Ledger) Rerun(ctx context.Context, req idemstore.RerunRequest) ([]idemstore.RerunOutcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var out []idemstore.RerunOutcome
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		sent, err := l.rerunSent(ctx, tx, req)
		if err != nil {
			return err
		}
		var jobs []string
		for _, key := range req.Keys {
			o, err := l.rerunKey(ctx, tx, key, req, sent)
			if err != nil {
				return err
			}
			out = append(out, o)
			if !slices.Contains(jobs, key.Job) {
				jobs = append(jobs, key.Job)
			}
		}
		for _, job := range jobs {
			if err := l.wake(ctx, tx, job); err != nil { // the Schedulers look at once
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, idemstore.ErrNotRerunnable) {
			return nil, fmt.Errorf("%w (nothing was changed)", err)
		}
		return nil, fmt.Errorf("mysqlledger: prefix %q: re-run: %w", l.prefix, err)
	}
	return out, nil
}

// rerunSent reports whether req's id is recorded for one of its keys: the
// request was sent before (and applied to all its keys at once), and a key
// it did not name then is not re-run now.
func (l *Ledger) rerunSent(ctx context.Context, tx *sql.Tx, req idemstore.RerunRequest) (bool, error) {
	for _, key := range req.Keys {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+l.t.reruns+` WHERE job = ? AND period = ? AND request_id = ?`,
			key.Job, key.Period, req.RequestID).Scan(&n)
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
func (l *Ledger) rerunKey(ctx context.Context, tx *sql.Tx, key idemstore.Key, req idemstore.RerunRequest, sent bool) (idemstore.RerunOutcome, error) {
	o := idemstore.RerunOutcome{Key: key}
	s, err := l.read(ctx, tx, key, true)
	if err != nil {
		return o, err
	}
	var seen int64
	err = tx.QueryRowContext(ctx, `SELECT revision FROM `+l.t.reruns+` WHERE job = ? AND period = ? AND request_id = ?`,
		key.Job, key.Period, req.RequestID).Scan(&seen)
	switch {
	case err == nil:
		// If it waited for an attempt that a done mark of an older
		// mysqlledger ended (which knows no requests), it is given now.
		if err := l.promote(ctx, tx, key); err != nil {
			return o, err
		}
		o.State, o.Revision = idemstore.RerunSeen, seen
		return o, nil
	case !errors.Is(err, sql.ErrNoRows):
		return o, err
	}
	if sent {
		// A key the request did not name when it was first sent (its
		// dependents, computed anew: RerunWithDependents): nothing more.
		o.State, o.Revision = idemstore.RerunSeen, s.rec.Revision
		return o, nil
	}
	if err := idemstore.Rerunnable(s.rec, s.found, s.covered); err != nil {
		return o, err
	}
	now := s.now.UnixMicro()
	insert := func(revision int64, state string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.reruns+` (job, period, request_id, revision, state, reason, by_whom, requested)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, key.Job, key.Period, req.RequestID, revision, state, req.Reason, req.By, now)
		return err
	}
	switch s.rec.Status {
	case idemstore.StatusDone, idemstore.StatusSkipped:
		o.State, o.Revision = idemstore.RerunQueued, s.rec.Revision+1
		if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.runs+` SET status = 'failed', revision = ?, failures = 0, not_before = 0,
			lease_until = 0, rerun_pending = 0, last_error = ?, updated = ? WHERE job = ? AND period = ?`,
			o.Revision, idemstore.RerunNote(req, o.Revision), now, key.Job, key.Period); err != nil {
			return o, err
		}
		// A request that waited for an attempt that did not end done (it
		// failed, and the period was skipped) is answered by this
		// revision: left pending, its promotion would run it once more.
		if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.reruns+` SET state = 'queued' WHERE job = ? AND period = ? AND state = 'pending'`,
			key.Job, key.Period); err != nil {
			return o, err
		}
		return o, insert(o.Revision, "queued")
	case idemstore.StatusRunning:
		// More requests while it runs share one revision.
		o.State, o.Revision = idemstore.RerunAfterRun, s.rec.Revision+1
		// The mark on the row sends its done mark to Finish's
		// transaction, which promotes (the row is locked here: a done
		// mark waits, then sees it).
		if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.runs+` SET rerun_pending = ? WHERE job = ? AND period = ?`,
			o.Revision, key.Job, key.Period); err != nil {
			return o, err
		}
		return o, insert(o.Revision, "pending")
	default: // failed: it runs again anyway
		o.State, o.Revision = idemstore.RerunDue, s.rec.Revision
		return o, insert(o.Revision, "queued")
	}
}

// RerunsDue implements [idemstore.Rerunner]: from the job's requests (few),
// not from its records (many): a Scheduler asks at every look at the job.
func (l *Ledger) RerunsDue(ctx context.Context, job, through string) ([]string, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT r.period FROM `+l.t.runs+` r
		WHERE r.job = ? AND r.period IN (SELECT DISTINCT period FROM `+l.t.reruns+` WHERE job = ? AND period <= ?)
		AND r.revision > 0 AND r.status IN ('failed', 'running') ORDER BY r.period`, job, job, through)
	if err != nil {
		return nil, fmt.Errorf("mysqlledger: re-runs due of %q: %w", job, err)
	}
	defer rows.Close()
	periods := []string{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("mysqlledger: re-runs due of %q: %w", job, err)
		}
		periods = append(periods, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlledger: re-runs due of %q: %w", job, err)
	}
	return periods, nil
}
