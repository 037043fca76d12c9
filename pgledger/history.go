package pgledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// The history of attempts (schema version 8): table attempts holds one row
// per attempt that ended, keyed by the key, its revision and the attempt's
// number, with its outcome (done, failed, unknown, parked, or abandoned:
// taken over once its lease expired or its process was gone), its error,
// owner and times. Triggers on runs write it, in the transaction that
// records the outcome (no extra commit, no extra round trip): BEFORE a
// claim (an INSERT, or an UPDATE that changes attempt) sets runs.started;
// AFTER an UPDATE that ends a running attempt, or an INSERT of a key done at
// once (a RunTx's first attempt, MarkFresh), the attempt's row goes into
// attempts. Being triggers, they also record the attempts that an older
// pgledger (version 7) ends on the same schema during a rolling update;
// the attempts it claimed before the upgrade have started NULL.
//
// runs.revision is the key's revision: 0 until re-runs of done periods
// exist. Everything here is expand-only: a version-7 process's statements
// work unchanged.
const historyDDL = `
ALTER TABLE {s}.runs ADD COLUMN IF NOT EXISTS revision bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS started timestamptz;
CREATE TABLE IF NOT EXISTS {s}.attempts (
	job      text COLLATE "C" NOT NULL,
	period   text COLLATE "C" NOT NULL,
	revision bigint NOT NULL,
	attempt  bigint NOT NULL,
	outcome  text NOT NULL,
	error    text NOT NULL DEFAULT '',
	owner    text NOT NULL DEFAULT '',
	started  timestamptz,
	ended    timestamptz NOT NULL,
	PRIMARY KEY (job, period, revision, attempt)
);
CREATE OR REPLACE FUNCTION {s}.attempt_started() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' OR NEW.attempt IS DISTINCT FROM OLD.attempt THEN
		NEW.started := pg_catalog.clock_timestamp();
	END IF;
	RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION {s}.attempt_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		IF NEW.status = 'done' AND NEW.attempt > 0 THEN
			INSERT INTO {s}.attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
			VALUES (NEW.job, NEW.period, NEW.revision, NEW.attempt, 'done', '', NEW.owner, NEW.started, NEW.updated)
			ON CONFLICT DO NOTHING;
		END IF;
	ELSIF OLD.status = 'running' AND (NEW.status <> 'running' OR NEW.attempt <> OLD.attempt) THEN
		INSERT INTO {s}.attempts(job, period, revision, attempt, outcome, error, owner, started, ended)
		VALUES (OLD.job, OLD.period, OLD.revision, OLD.attempt,
			CASE WHEN NEW.attempt <> OLD.attempt THEN 'abandoned' ELSE NEW.status END,
			NEW.last_error, OLD.owner, OLD.started, NEW.updated)
		ON CONFLICT DO NOTHING;
	END IF;
	RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS attempt_started ON {s}.runs;
CREATE TRIGGER attempt_started BEFORE INSERT OR UPDATE OF attempt ON {s}.runs
	FOR EACH ROW EXECUTE FUNCTION {s}.attempt_started();
DROP TRIGGER IF EXISTS attempt_ended ON {s}.runs;
CREATE TRIGGER attempt_ended AFTER INSERT OR UPDATE ON {s}.runs
	FOR EACH ROW EXECUTE FUNCTION {s}.attempt_ended()`

// historyDDLAll is historyDDL and the durable-commit trigger of table
// attempts (see durableDDL).
func historyDDLAll() string {
	return historyDDL + ";\n" + strings.ReplaceAll(durableTriggerSQL, "{t}", "attempts")
}

const (
	historyAttemptsSQL = `SELECT revision, attempt, outcome, error, owner, started, ended FROM {s}.attempts
	WHERE job = $1 AND period = $2 ORDER BY revision, attempt`
	historyRerunsSQL = `SELECT request_id, revision, state, reason, by_whom, requested FROM {s}.reruns
	WHERE job = $1 AND period = $2 ORDER BY requested, request_id`
)

// History implements [idemstore.Historian]: the key's attempts that ended
// (table attempts, schema version 8) and its re-run requests (table
// reruns, schema version 9), oldest first. An attempt claimed by a
// pgledger before version 8 has no start time.
func (l *core) History(ctx context.Context, key idemstore.Key) (idemstore.History, error) {
	var h idemstore.History
	if err := key.Validate(); err != nil {
		return h, err
	}
	err := l.db.query(ctx, l.oq(historyAttemptsSQL), []any{key.Job, key.Period}, func(scan func(...any) error) error {
		var a idemstore.AttemptRecord
		var started *time.Time
		if err := scan(&a.Revision, &a.Attempt, &a.Outcome, &a.Error, &a.Owner, &started, &a.Ended); err != nil {
			return err
		}
		if started != nil {
			a.Started = *started
		}
		h.Attempts = append(h.Attempts, a)
		return nil
	})
	if err == nil {
		err = l.db.query(ctx, l.oq(historyRerunsSQL), []any{key.Job, key.Period}, func(scan func(...any) error) error {
			var r idemstore.RerunRecord
			if err := scan(&r.RequestID, &r.Revision, &r.State, &r.Reason, &r.By, &r.Requested); err != nil {
				return err
			}
			h.Reruns = append(h.Reruns, r)
			return nil
		})
	}
	if err != nil {
		return idemstore.History{}, fmt.Errorf("pgledger: schema %q: history of %s: %w", l.schema, key, err)
	}
	return h, nil
}
