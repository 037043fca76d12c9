package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// Lookup implements [idemstore.Store]: it returns the key's record. A period at
// or before the job's horizon, whose record was pruned, is reported done.
func (l *Ledger) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	rec, ok, err := l.record(ctx, key)
	if err != nil || ok {
		return rec, ok, err
	}
	var n int
	err = busyRetry(ctx, func() error {
		return l.queryRow(ctx, `SELECT count(*) FROM idem_jobs WHERE job=? AND horizon >= ?`, key.Job, key.Period).Scan(&n)
	})
	if n > 0 {
		return Record{Key: key, Status: StatusDone}, true, err
	}
	return rec, false, err
}

// Job implements [idemstore.CatchUpStore].
func (l *Ledger) Job(ctx context.Context, job string) (JobState, error) {
	js := JobState{Job: job}
	err := busyRetry(ctx, func() error {
		err := l.db.QueryRowContext(ctx, `SELECT cursor, horizon FROM idem_jobs WHERE job=?`, job).Scan(&js.Cursor, &js.Horizon)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return JobState{}, fmt.Errorf("idem: %s: job %q: %w", l.where(), job, err)
	}
	return js, nil
}

// Start implements [idemstore.CatchUpStore]: it sets the job's cursor to before
// unless the job has one, and reads the job back, in one durable
// transaction.
func (l ledgerStore) Start(ctx context.Context, job, before string) (JobState, error) {
	if err := (Key{Job: job, Period: before}).Validate(); err != nil {
		return JobState{}, err
	}
	js := JobState{Job: job}
	err := l.withTx(ctx, true, func(tx *wtx) error {
		if _, err := tx.exec(`INSERT INTO idem_jobs(job, cursor) VALUES(?, ?)
			ON CONFLICT(job) DO UPDATE SET cursor = excluded.cursor WHERE idem_jobs.cursor = ''`, job, before); err != nil {
			return err
		}
		return tx.queryRow(`SELECT cursor, horizon FROM idem_jobs WHERE job=?`, job).Scan(&js.Cursor, &js.Horizon)
	})
	if err != nil {
		return JobState{}, fmt.Errorf("idem: %s: start %s after %s: %w", l.where(), job, before, err)
	}
	return js, nil
}

// Advance implements [idemstore.CatchUpStore].
func (l ledgerStore) Advance(ctx context.Context, job, period string) error {
	if err := (Key{Job: job, Period: period}).Validate(); err != nil {
		return err
	}
	err := l.withTx(ctx, true, func(tx *wtx) error { return advanceExec(tx, job, period) })
	if err != nil {
		return fmt.Errorf("idem: %s: advance %s to %s: %w", l.where(), job, period, err)
	}
	return nil
}

// Prune implements [idemstore.CatchUpStore]: it deletes the job's done and
// skipped records at or before through and raises the job's horizon to through,
// in one transaction.
func (l *Ledger) Prune(ctx context.Context, job, through string) (int64, error) {
	if err := (Key{Job: job, Period: through}).Validate(); err != nil {
		return 0, err
	}
	var deleted int64
	err := l.withTx(ctx, true, func(tx *wtx) error {
		// First statement a write: make sure the job's row exists.
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_jobs(job) VALUES(?) ON CONFLICT DO NOTHING`, job); err != nil {
			return err
		}
		var cursor string
		if err := tx.QueryRowContext(ctx, `SELECT cursor FROM idem_jobs WHERE job=?`, job).Scan(&cursor); err != nil {
			return err
		}
		var open int64
		var first sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT count(*), min(period) FROM idem_runs
			WHERE job=? AND period <= ? AND status NOT IN ('done', 'skipped')`, job, through).Scan(&open, &first); err != nil {
			return err
		}
		if err := idemstore.Prunable(job, through, cursor, open, first.String); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM idem_runs WHERE job=? AND period <= ?`, job, through)
		if err != nil {
			return err
		}
		deleted, _ = res.RowsAffected()
		// The item records of those periods (Each) go with them.
		for _, q := range []string{
			`DELETE FROM idem_item_set WHERE job=? AND period <= ?`,
			`DELETE FROM idem_item_chunks WHERE job=? AND period <= ?`,
			`DELETE FROM idem_item_lists WHERE job=? AND period <= ?`,
			`DELETE FROM idem_item_state WHERE job=? AND period <= ?`,
			`DELETE FROM idem_itemsets WHERE job=? AND period <= ?`,
			`DELETE FROM idem_attempts WHERE job=? AND period <= ?`,
			`DELETE FROM idem_reruns WHERE job=? AND period <= ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, job, through); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE idem_jobs SET horizon = ? WHERE job = ? AND horizon < ?`, through, job, through); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrPruneRefused) {
			return 0, err
		}
		return 0, fmt.Errorf("idem: %s: prune %s through %s: %w", l.where(), job, through, err)
	}
	return deleted, nil
}

// List implements [idemstore.Lister].
func (l *Ledger) List(ctx context.Context, f Filter) ([]Record, error) {
	q := `SELECT job, period, ` + recordCols + ` FROM idem_runs WHERE (? = '' OR job = ?) AND (? = '' OR status = ?) ORDER BY job, period`
	args := []any{f.Job, f.Job, string(f.Status), string(f.Status)}
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	var recs []Record
	err := busyRetry(ctx, func() error {
		recs = recs[:0]
		rows, err := l.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Record
			var status string
			var lease, notBefore, updated int64
			if err := rows.Scan(&r.Key.Job, &r.Key.Period, &status, &r.Attempt, &r.Failures, &r.Owner,
				&lease, &notBefore, &r.LastError, &updated, &r.Fingerprint, &r.Value, &r.Revision); err != nil {
				return err
			}
			r.Status, r.LeaseUntil, r.NotBefore, r.Updated = Status(status), fromMicros(lease), fromMicros(notBefore), fromMicros(updated)
			recs = append(recs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: list: %w", l.where(), err)
	}
	return recs, nil
}

// Resolve implements [idemstore.Store]: it settles a key by hand. ResolveDone
// marks it done (the work did happen); ResolveRetry makes it runnable at once
// with its failure count cleared (the work did not happen). It refuses a key
// that is done or held by a live attempt, with [ErrNotResolvable].
func (l *Ledger) Resolve(ctx context.Context, key Key, to Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	err := l.withTx(ctx, true, func(tx *wtx) error {
		now := l.clock.Now()
		// First statement a write: touch the row if it exists.
		if _, err := tx.ExecContext(ctx, `UPDATE idem_runs SET updated=updated WHERE job=? AND period=?`, key.Job, key.Period); err != nil {
			return err
		}
		rec, found, err := scanRecord(key, tx.queryRow(selectRecord, key.Job, key.Period))
		if err != nil {
			return err
		}
		if !found {
			var pruned int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM idem_jobs WHERE job=? AND horizon >= ?`, key.Job, key.Period).Scan(&pruned); err != nil {
				return err
			}
			if pruned > 0 { // below the horizon: done forever
				rec, found = Record{Key: key, Status: StatusDone}, true
			}
		}
		if err := idemstore.Resolvable(rec, found, to, now); err != nil {
			return err
		}
		status, msg := idemstore.Resolved(rec, to)
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_runs(job, period, status, attempt, failures, last_error, created, updated)
			VALUES(?, ?, ?, 0, 0, ?, ?, ?)
			ON CONFLICT(job, period) DO UPDATE SET status=excluded.status, failures=0, not_before=0, lease_until=0,
				last_error=excluded.last_error, updated=excluded.updated`,
			key.Job, key.Period, string(status), msg, micros(now), micros(now)); err != nil {
			return err
		}
		return wakeJob(tx, key.Job) // the Schedulers look at the job at once
	})
	if err != nil {
		return l.opErr("resolve", key, err)
	}
	return nil
}

// Reset un-parks a parked key: it becomes runnable at once with its
// failure count cleared. It is Resolve(ctx, key, ResolveRetry).
func (l *Ledger) Reset(ctx context.Context, key Key) error { return l.Resolve(ctx, key, ResolveRetry) }
