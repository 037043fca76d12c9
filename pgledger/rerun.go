package pgledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// Re-runs of done periods (schema version 9, idem.Rerun): table reruns
// holds one row per request and period, keyed by the request's id, so
// that the same request sent again changes nothing. Its state is queued
// (the period has the request's revision, or had it: a failed period's
// request is recorded with the revision that runs anyway) or pending (an
// attempt held the period when the request came: the attempt's done mark
// gives the period the request's revision).
//
// The done mark's promotion is a trigger on runs, rerun_after_done, AFTER
// an UPDATE of status from running to done: it runs promote_rerun in the
// done mark's own transaction, whichever statement wrote it (Finish,
// FinishTx on a pool or a *sql.DB, ClaimFinishTx's fence, an older
// pgledger's done mark during a rolling update), at no round trip's cost.
// The history trigger attempt_ended records the attempt as done first,
// with the revision it ran (the UPDATE's OLD row); promote_rerun's own
// UPDATE of the row (done to failed) ends no running attempt, so it adds
// no row to attempts. A done mark that finds no pending request costs one
// lookup of reruns' primary key.
//
// promote_rerun(job, period) gives the period, if it is done, the
// revision of its oldest pending request, and makes all of its pending
// requests queued (they share that revision). A period that is not done
// keeps its pending requests (a failed attempt's retry promotes them when
// it ends done). Rerun calls it too, for a request sent again whose
// attempt ended done without a promotion (not expected while the trigger
// exists; kept as the SQLite ledger does it). Its note (last_error) is
// idemstore.RerunNote's text (TestRerunEveryDoneMark compares them).
//
// The partial index runs_revised holds the periods that were ever re-run
// (revision above 0), for RerunsDue: revision is its only column beside
// the key's, and it changes only when a period is re-run, so the index
// keeps the updates of claims and done marks HOT as before. state has no
// CHECK, so that a later version may add states that this one leaves
// alone. Everything here is expand-only: a version-8 pgledger's
// statements work unchanged, and its done marks promote too (the trigger
// is the schema's).
const rerunsDDL = `
CREATE TABLE IF NOT EXISTS {s}.reruns (
	job        text COLLATE "C" NOT NULL,
	period     text COLLATE "C" NOT NULL,
	request_id text COLLATE "C" NOT NULL,
	revision   bigint NOT NULL,
	state      text NOT NULL, -- queued, pending
	reason     text NOT NULL,
	by_whom    text NOT NULL DEFAULT '',
	requested  timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (job, period, request_id)
);
CREATE INDEX IF NOT EXISTS runs_revised ON {s}.runs (job, period) WHERE revision > 0;
CREATE OR REPLACE FUNCTION {s}.promote_rerun(j text, p text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	r record;
BEGIN
	SELECT revision, reason, by_whom, request_id INTO r FROM {s}.reruns
		WHERE job = j AND period = p AND state = 'pending' ORDER BY requested, request_id LIMIT 1;
	IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM {s}.runs WHERE job = j AND period = p AND status = 'done') THEN
		RETURN;
	END IF;
	UPDATE {s}.runs SET status = 'failed', revision = r.revision, failures = 0, not_before = NULL, lease_until = NULL,
		last_error = pg_catalog.format('re-run requested as revision %s by %s (request %s): %s',
			r.revision, coalesce(nullif(r.by_whom, ''), '?'), r.request_id, r.reason)
	WHERE job = j AND period = p AND status = 'done' AND revision < r.revision;
	UPDATE {s}.reruns SET state = 'queued' WHERE job = j AND period = p AND state = 'pending';
END
$$;
CREATE OR REPLACE FUNCTION {s}.rerun_after_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM {s}.promote_rerun(NEW.job, NEW.period);
	RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS rerun_after_done ON {s}.runs;
CREATE TRIGGER rerun_after_done AFTER UPDATE OF status ON {s}.runs
	FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status = 'done')
	EXECUTE FUNCTION {s}.rerun_after_done()`

// rerunsDDLAll is rerunsDDL and the durable-commit trigger of table
// reruns (see durableDDL).
func rerunsDDLAll() string {
	return rerunsDDL + ";\n" + strings.ReplaceAll(durableTriggerSQL, "{t}", "reruns")
}

const (
	rerunSeenSQL    = `SELECT revision FROM {s}.reruns WHERE job = $1 AND period = $2 AND request_id = $3`
	rerunPromoteSQL = `SELECT {s}.promote_rerun($1, $2)`
	rerunCoveredSQL = `SELECT EXISTS (SELECT 1 FROM {s}.jobs WHERE job = $1 AND horizon >= $2 COLLATE "C")`
	rerunInsertSQL  = `INSERT INTO {s}.reruns(job, period, request_id, revision, state, reason, by_whom, requested)
	VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp())`
	// rerunQueueSQL gives a done or skipped period revision $3, runnable
	// at once: no backoff, no failure counted, the lease cleared, the note
	// $4. Its attempt stays: the re-run's claim takes the next one.
	rerunQueueSQL = `UPDATE {s}.runs SET status = 'failed', revision = $3, failures = 0, not_before = NULL, lease_until = NULL,
		last_error = $4, updated = clock_timestamp()
	WHERE job = $1 AND period = $2`
	rerunsDueSQL = `SELECT period FROM {s}.runs
	WHERE job = $1 AND period <= $2 COLLATE "C" AND revision > 0 AND status IN ('failed', 'running')
	ORDER BY period`
)

// Rerun implements [idemstore.Rerunner] in one transaction, committed
// durably (the trigger durable_commit) before it returns: every key of req
// gets its new revision or pending request, or, if one of them cannot be
// re-run ([idemstore.Rerunnable]), none does. Each key's row is locked
// while it is decided on, and the shared advisory lock of each of req's
// jobs keeps Prune out until the commit (as for a claim). Times are the
// server's: req.Now is ignored. A pending request is promoted by the
// attempt's done mark, in its transaction (see rerunsDDL).
func (l *core) Rerun(ctx context.Context, req idemstore.RerunRequest) ([]idemstore.RerunOutcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var jobs []string
	for _, k := range req.Keys {
		jobs = append(jobs, k.Job)
	}
	slices.Sort(jobs) // one order of the locks for every request
	jobs = slices.Compact(jobs)
	var out []idemstore.RerunOutcome
	err := inTx(ctx, l.db, func(tx tx) error {
		out = out[:0]
		for _, job := range jobs {
			if _, err := tx.exec(ctx, lockSharedSQL, l.lockID("job", job)); err != nil {
				return err
			}
		}
		// Sent before (applied to all its keys at once)? Then a key it
		// did not name then (its dependents, computed anew:
		// idem.RerunWithDependents) is not re-run now.
		sent := false
		for _, key := range req.Keys {
			var seen int64
			err := tx.queryRow(ctx, l.oq(rerunSeenSQL), []any{key.Job, key.Period, req.RequestID}, &seen)
			if err == nil {
				sent = true
				break
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		for _, key := range req.Keys {
			o, err := l.rerunKey(ctx, tx, key, req, sent)
			if err != nil {
				return err
			}
			out = append(out, o)
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
		return nil, fmt.Errorf("pgledger: schema %q: re-run: %w", l.schema, err)
	}
	return out, nil
}

// rerunKey applies req to key in tx (see idemstore.Rerunner). The key's
// row is locked first: a request sent twice at once is decided on once,
// and a done mark waits for the decision (or the request for the mark).
func (l *core) rerunKey(ctx context.Context, tx tx, key idemstore.Key, req idemstore.RerunRequest, sent bool) (idemstore.RerunOutcome, error) {
	o := idemstore.RerunOutcome{Key: key}
	rec := idemstore.Record{Key: key}
	var status string
	var lease, notBefore, updated *time.Time
	var now time.Time
	err := tx.queryRow(ctx, l.q.lockRow, []any{key.Job, key.Period}, &now, &status, &rec.Attempt,
		&rec.Failures, &rec.Owner, &lease, &notBefore, &rec.LastError, &updated, &rec.Fingerprint, &rec.Value, &rec.Revision)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return o, err
	}
	rec.Status = idemstore.Status(status)
	// Sent before? A new statement, after the row's lock: it sees what a
	// request that held the lock committed.
	var seen int64
	err = tx.queryRow(ctx, l.oq(rerunSeenSQL), []any{key.Job, key.Period, req.RequestID}, &seen)
	switch {
	case err == nil:
		// If it waited for an attempt that ended done without giving the
		// period its revision, it is given now.
		if _, err := tx.exec(ctx, l.oq(rerunPromoteSQL), key.Job, key.Period); err != nil {
			return o, err
		}
		o.State, o.Revision = idemstore.RerunSeen, seen
		return o, nil
	case !errors.Is(err, sql.ErrNoRows):
		return o, err
	}
	if sent {
		o.State, o.Revision = idemstore.RerunSeen, rec.Revision
		return o, nil
	}
	pruned := false
	if !found {
		if err := tx.queryRow(ctx, l.oq(rerunCoveredSQL), []any{key.Job, key.Period}, &pruned); err != nil {
			return o, err
		}
	}
	if err := idemstore.Rerunnable(rec, found, pruned); err != nil {
		return o, err
	}
	insert := func(revision int64, state string) error {
		_, err := tx.exec(ctx, l.oq(rerunInsertSQL), key.Job, key.Period, req.RequestID, revision, state, req.Reason, req.By)
		return err
	}
	switch rec.Status {
	case idemstore.StatusDone, idemstore.StatusSkipped:
		o.State, o.Revision = idemstore.RerunQueued, rec.Revision+1
		if _, err := tx.exec(ctx, l.oq(rerunQueueSQL), key.Job, key.Period, o.Revision, idemstore.RerunNote(req, o.Revision)); err != nil {
			return o, err
		}
		// A request that waited for an attempt that did not end done (it
		// failed, and the period was skipped) is answered by this
		// revision: left pending, its promotion would run it once more.
		if _, err := tx.exec(ctx, l.oq(`UPDATE {s}.reruns SET state = 'queued' WHERE job = $1 AND period = $2 AND state = 'pending'`), key.Job, key.Period); err != nil {
			return o, err
		}
		return o, insert(o.Revision, "queued")
	case idemstore.StatusRunning:
		// More requests while it runs share one revision.
		o.State, o.Revision = idemstore.RerunAfterRun, rec.Revision+1
		return o, insert(o.Revision, "pending")
	default: // failed: it runs again anyway
		o.State, o.Revision = idemstore.RerunDue, rec.Revision
		return o, insert(o.Revision, "queued")
	}
}

// RerunsDue implements [idemstore.Rerunner]: a range of the partial index
// runs_revised (the job's periods that were ever re-run), filtered by
// status.
func (l *core) RerunsDue(ctx context.Context, job, through string) ([]string, error) {
	periods := []string{}
	err := l.db.query(ctx, l.oq(rerunsDueSQL), []any{job, through}, func(scan func(...any) error) error {
		var p string
		err := scan(&p)
		periods = append(periods, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgledger: re-runs due of %q: %w", job, err)
	}
	return periods, nil
}
