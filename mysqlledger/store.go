package mysqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
)

const runCols = `status, attempt, failures, owner, lease_until, not_before, last_error, updated, fingerprint, value, revision`

// scanRun scans runCols (after now) into rec.
func scanRun(row interface{ Scan(...any) error }, now *int64, rec *idemstore.Record) error {
	var status string
	var lease, notBefore, updated int64
	err := row.Scan(now, &status, &rec.Attempt, &rec.Failures, &rec.Owner, &lease, &notBefore, &rec.LastError, &updated, &rec.Fingerprint, &rec.Value, &rec.Revision)
	rec.Status = idemstore.Status(status)
	rec.LeaseUntil, rec.NotBefore, rec.Updated = fromMicros(lease), fromMicros(notBefore), fromMicros(updated)
	return err
}

// snapshot is a key's record as read with the server's time.
type snapshot struct {
	now     time.Time
	rec     idemstore.Record
	found   bool
	covered bool // no record, and the job's horizon covers the period
}

// view is the record as the claim rule sees it: a period the job's horizon
// covers is done.
func (s snapshot) view() (idemstore.Record, bool) {
	if !s.found && s.covered {
		return idemstore.Record{Key: s.rec.Key, Status: idemstore.StatusDone}, true
	}
	return s.rec, s.found
}

// read reads key's record, locked FOR UPDATE when lock (in a
// transaction), then the job's horizon (locked shared when lock: Prune
// locks the job's row exclusively), and the server's time. The record's
// row comes first, then the job's: the order in which FinishTx takes them
// (the fence, then the cursor), so that a claim waiting for a RunTx's key
// never holds what that RunTx needs to commit.
func (l *Ledger) read(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, key idemstore.Key, lock bool) (snapshot, error) {
	s := snapshot{rec: idemstore.Record{Key: key}}
	lockJob, lockRun := "", ""
	if lock {
		lockJob, lockRun = ` LOCK IN SHARE MODE`, ` FOR UPDATE`
	}
	var now int64
	err := scanRun(q.QueryRowContext(ctx, `SELECT `+nowSQL+`, `+runCols+` FROM `+l.t.runs+` WHERE job = ? AND period = ?`+lockRun,
		key.Job, key.Period), &now, &s.rec)
	switch {
	case err == nil:
		s.found = true
	case errors.Is(err, sql.ErrNoRows):
		s.rec = idemstore.Record{Key: key}
	default:
		return s, err
	}
	// One row, with the server's time, whether the job has a row or not.
	var horizon string
	err = q.QueryRowContext(ctx, `SELECT `+nowSQL+`, COALESCE((SELECT horizon FROM `+l.t.jobs+` WHERE job = ?`+lockJob+`), '')`, key.Job).Scan(&now, &horizon)
	if err != nil {
		return s, err
	}
	s.covered = !s.found && horizon != "" && key.Period <= horizon
	s.now = fromMicros(now)
	return s, nil
}

// inFrame expresses the deadlines of rec, read at the server's time now,
// on the claimer's clock (req.Now plus what remains of them on the
// server's clock).
func inFrame(req idemstore.ClaimRequest, now time.Time, rec idemstore.Record) idemstore.Record {
	if req.Now.IsZero() {
		return rec
	}
	move := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return req.Now.Add(t.Sub(now))
	}
	rec.LeaseUntil, rec.NotBefore = move(rec.LeaseUntil), move(rec.NotBefore)
	return rec
}

// Claim implements [idemstore.Store]. A key with no record is claimed by
// one autocommitted statement (claimNewSQL: attempt 1's row, unless the
// job's horizon covers the key, read under a shared lock of the job's
// row, as below): one round trip and one commit. A recorded key makes
// that statement fail with a duplicate key, writing nothing; then, as
// for every key while the keys claimed keep having records (duplicate
// triggers: see readFirst), Claim reads the key's status, fingerprint
// and value by primary key, without a lock: a done key or a fingerprint
// that does not match is answered from that read, with the fields
// [idemstore.Claim] lets a store fill in alone. Another recorded key is
// read whole, again without a lock, and a key not to be taken (held,
// backing off, parked, skipped) is answered from that read. Otherwise
// (the key has a record to take, the horizon covers it, or another
// claimer inserted it in between), in one READ COMMITTED transaction it
// reads the key's record under its row lock (FOR UPDATE) and the job's
// horizon under a shared lock of the job's row, decides with
// [idemstore.Decide] on the server's clock, and writes the claim. Two
// claimers of a new key both insert: the loser's INSERT fails with a
// duplicate key, and it reads the record again. A key that is not taken
// is written nothing.
func (l *Ledger) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if err := req.Key.Validate(); err != nil {
		return idemstore.Claim{}, err
	}
	if c, ok, err := l.claimFirst(ctx, req); err != nil {
		return idemstore.Claim{}, opErr("claim", req.Key, err)
	} else if ok {
		return c, nil
	}
	if s, found, err := l.peek(ctx, req.Key); err == nil && found {
		if c, ok := l.settledBy(req, s); ok {
			return c, nil
		}
	}
	var c idemstore.Claim
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		for tries := 0; ; tries++ {
			if tries == 100 {
				return errors.New("the record kept changing under the claim")
			}
			s, err := l.read(ctx, tx, req.Key, true)
			if err != nil {
				return err
			}
			rec, found := s.view()
			r := req
			r.Now = s.now
			state, take, doubt := idemstore.Decide(rec, found, r)
			if !take {
				c = idemstore.Claim{State: state, Record: inFrame(req, s.now, rec)}
				return nil
			}
			now := s.now.UnixMicro()
			lease := now + micros(req.Lease)
			if !s.found {
				_, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.runs+` (job, period, status, attempt, failures, owner, lease_until, not_before,
					last_error, created, updated, fingerprint, value) VALUES (?, ?, 'running', 1, 0, ?, ?, 0, '', ?, ?, ?, NULL)`,
					req.Key.Job, req.Key.Period, req.Owner, lease, now, now, req.Fingerprint)
				if errno(err) == erDupEntry {
					continue // another claimer inserted it: read it again
				}
				if err != nil {
					return err
				}
				c = idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: idemstore.Record{Key: req.Key}}
				return nil
			}
			taken := idemstore.TakenOver(s.rec, s.now)
			fp := idemstore.KeptFingerprint(s.rec.Fingerprint, req.Fingerprint)
			_, err = tx.ExecContext(ctx, `UPDATE `+l.t.runs+` SET status = 'running', attempt = attempt + 1, failures = ?,
				owner = ?, lease_until = ?, not_before = 0, last_error = ?, updated = ?, fingerprint = ?
				WHERE job = ? AND period = ?`,
				taken.Failures, req.Owner, lease, taken.LastError, now, fp, req.Key.Job, req.Key.Period)
			if err != nil {
				return err
			}
			taken.Fingerprint = fp
			c = idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: s.rec.Attempt + 1, Doubt: doubt, Record: inFrame(req, s.now, taken)}
			return nil
		}
	})
	if err != nil {
		return idemstore.Claim{}, opErr("claim", req.Key, err)
	}
	return c, nil
}

// Renew implements [idemstore.Store]: the lease runs until the server's
// time plus lease (now is ignored).
func (l *Ledger) Renew(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, lease time.Duration) error {
	res, err := l.exec(ctx, `UPDATE `+l.t.runs+` SET lease_until = `+nowSQL+` + ?
		WHERE job = ? AND period = ? AND attempt = ? AND status = 'running'`, micros(lease), key.Job, key.Period, attempt)
	if err != nil {
		return opErr("renew", key, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return opErr("renew", key, err)
	} else if n > 0 {
		return nil
	}
	// MySQL counts changed rows: a lease renewed to the value it had (in
	// the same microsecond) changed none. Check that the attempt holds.
	if held, err := l.holds(ctx, l.db, key, attempt, false); err != nil {
		return opErr("renew", key, err)
	} else if !held {
		return idemstore.LeaseLost(key, attempt)
	}
	return nil
}

// holds reports whether attempt still runs key, locking its row when lock.
func (l *Ledger) holds(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, key idemstore.Key, attempt int64, lock bool) (bool, error) {
	forUpdate := ""
	if lock {
		forUpdate = " FOR UPDATE"
	}
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM `+l.t.runs+` WHERE job = ? AND period = ? AND attempt = ? AND status = 'running'`+forUpdate,
		key.Job, key.Period, attempt).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// finishSQL: the 4th parameter is the backoff in microseconds from the
// server's time, NULL for none. An UPDATE that changes nothing (the same
// values) still matches its row: the driver is asked for found rows, not
// changed ones, by the WHERE clause's own check (status = 'running' always
// changes).
func (l *Ledger) finishSQL() string { return l.q.finish }

func (l *Ledger) finishArgs(key idemstore.Key, attempt int64, end idemstore.End) []any {
	var backoff any // NULL: no deadline
	if d, ok := end.BackoffDelay(); ok {
		backoff = micros(d)
	}
	var value []byte // NULL: none
	if end.Status == idemstore.StatusDone {
		value = end.Value
	}
	return []any{string(end.Status), end.Failures, backoff, backoff, end.Error, value, key.Job, key.Period, attempt}
}

// advanceSQL moves a job's cursor forward (byte order).
func (l *Ledger) advanceSQL() string { return l.q.advance }

// Finish implements [idemstore.Store]: most often one autocommitted
// UPDATE, fenced by its WHERE clause (the attempt, still running). A
// backoff deadline is kept on the server's clock: end.NotBefore - end.Now
// from the server's time. With end.Cursor, a done mark also moves the
// job's cursor forward, in the same transaction; a done mark of an attempt
// for which a re-run request waits ([Ledger.Rerun] while it ran: the
// row's rerun_pending) gives the period the request's revision, in the
// same transaction too.
func (l *Ledger) Finish(ctx context.Context, key idemstore.Key, attempt int64, end idemstore.End) error {
	if err := end.Check("mysqlledger", key); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx) // a finished attempt must be recorded even if the caller gave up
	done := end.Status == idemstore.StatusDone
	if !end.Cursor || !done {
		// One statement, autocommitted: its WHERE clause is the fence. A
		// done mark's also asks that no re-run request wait for the
		// attempt (rerun_pending, set under the row's lock by Rerun):
		// one that does is written by the transaction below, with the
		// promotion.
		q := l.finishSQL()
		if done {
			q = l.q.finishDone
		}
		res, err := l.exec(ctx, q, l.finishArgs(key, attempt, end)...)
		if err != nil {
			return opErr("finish", key, err)
		}
		n, err := res.RowsAffected()
		switch {
		case err != nil:
			return opErr("finish", key, err)
		case n == 1:
			return nil
		case !done:
			return idemstore.LeaseLost(key, attempt)
		}
		// Lost, or a request waits: the transaction decides.
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, l.finishSQL(), l.finishArgs(key, attempt, end)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return idemstore.LeaseLost(key, attempt)
		}
		if end.Status != idemstore.StatusDone {
			return nil
		}
		if end.Cursor {
			if _, err := tx.ExecContext(ctx, l.advanceSQL(), key.Job, key.Period); err != nil {
				return err
			}
		}
		return l.promote(ctx, tx, key)
	})
	if err != nil && !errors.Is(err, idemstore.ErrLeaseLost) {
		return opErr("finish", key, err)
	}
	return err
}

// FinishTx implements [idemstore.TxStore] with *sql.Tx: a READ COMMITTED
// transaction whose first statement checks that attempt still holds the
// key and takes the key's row lock (kept until the transaction ends:
// every other attempt waits), then fn, then the done mark (and, with
// cursor, the job's cursor, and the promotion of a re-run request that
// waited for this attempt: see [Ledger.Rerun]), then the commit. fn's error is returned as it
// is, and everything rolls back.
func (l *Ledger) FinishTx(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) ([]byte, error)) error {
	tx, err := l.db.BeginTx(ctx, txOpts)
	if err != nil {
		return opErr("run tx", key, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if held, err := l.holds(ctx, tx, key, attempt, true); err != nil {
		return opErr("run tx", key, err)
	} else if !held {
		return idemstore.LeaseLost(key, attempt)
	}
	value, err := fn(tx)
	if err != nil {
		return err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
		return err
	}
	end := idemstore.End{Status: idemstore.StatusDone, Value: value}
	// The done mark, unless a re-run request waits for this attempt
	// (rerun_pending): then it is written with the promotion. The row is
	// locked since holds: it does not change in between.
	res, err := tx.ExecContext(ctx, l.q.finishDone, l.finishArgs(key, attempt, end)...)
	if err != nil {
		return opErr("run tx: done mark", key, err)
	}
	pending := false
	if n, err := res.RowsAffected(); err != nil {
		return opErr("run tx: done mark", key, err)
	} else if n == 0 {
		pending = true
		if _, err := tx.ExecContext(ctx, l.finishSQL(), l.finishArgs(key, attempt, end)...); err != nil {
			return opErr("run tx: done mark", key, err)
		}
	}
	if cursor {
		if _, err := tx.ExecContext(ctx, l.advanceSQL(), key.Job, key.Period); err != nil {
			return opErr("run tx: advance the cursor", key, err)
		}
	}
	if pending {
		if err := l.promote(ctx, tx, key); err != nil {
			return opErr("run tx", key, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return opErr("run tx: commit", key, err)
	}
	return nil
}

// Resolve implements [idemstore.Store]: it settles a key by hand, under
// the key's row lock. It refuses, with [idemstore.ErrNotResolvable], a key
// that is done (also by the job's horizon) or held by a live attempt, and
// a retry of a key that has no record.
func (l *Ledger) Resolve(ctx context.Context, key idemstore.Key, to idemstore.Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		for {
			s, err := l.read(ctx, tx, key, true)
			if err != nil {
				return err
			}
			rec, found := s.view()
			if err := idemstore.Resolvable(rec, found, to, s.now); err != nil {
				return err
			}
			status, note := idemstore.Resolved(s.rec, to)
			now := s.now.UnixMicro()
			if s.found {
				_, err = tx.ExecContext(ctx, `UPDATE `+l.t.runs+` SET status = ?, failures = 0, not_before = 0, lease_until = 0,
					last_error = ?, updated = ? WHERE job = ? AND period = ?`, string(status), note, now, key.Job, key.Period)
			} else {
				_, err = tx.ExecContext(ctx, `INSERT INTO `+l.t.runs+` (job, period, status, attempt, failures, owner, lease_until, not_before,
					last_error, created, updated, fingerprint, value) VALUES (?, ?, ?, 0, 0, '', 0, 0, ?, ?, ?, '', NULL)`,
					key.Job, key.Period, string(status), note, now, now)
				if errno(err) == erDupEntry {
					continue // a claim inserted the record in between: decide on it
				}
			}
			if err != nil {
				return err
			}
			return l.wake(ctx, tx, key.Job) // the Schedulers look at the job at once
		}
	})
	if err != nil && !errors.Is(err, idemstore.ErrNotResolvable) {
		return opErr("resolve", key, err)
	}
	return err
}

// Lookup implements [idemstore.Store]: the key's record. A period with no
// record that the job's horizon covers (it was pruned) is reported done.
// Times are the server's.
func (l *Ledger) Lookup(ctx context.Context, key idemstore.Key) (idemstore.Record, bool, error) {
	if err := key.Validate(); err != nil {
		return idemstore.Record{}, false, err
	}
	s, err := l.read(ctx, l.db, key, false)
	if err != nil {
		return idemstore.Record{}, false, opErr("lookup", key, err)
	}
	switch {
	case s.found:
		return s.rec, true, nil
	case s.covered:
		return idemstore.Record{Key: key, Status: idemstore.StatusDone}, true, nil
	}
	return idemstore.Record{Key: key}, false, nil
}

// Job implements [idemstore.CatchUpStore].
func (l *Ledger) Job(ctx context.Context, job string) (idemstore.JobState, error) {
	js := idemstore.JobState{Job: job}
	err := l.db.QueryRowContext(ctx, `SELECT cursor_period, horizon FROM `+l.t.jobs+` WHERE job = ?`, job).Scan(&js.Cursor, &js.Horizon)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return idemstore.JobState{}, fmt.Errorf("mysqlledger: job %q: %w", job, err)
	}
	return js, nil
}

// Start implements [idemstore.CatchUpStore]: it sets the job's cursor to
// before unless the job has one, and reads the job back, in one
// transaction.
func (l *Ledger) Start(ctx context.Context, job, before string) (idemstore.JobState, error) {
	if err := (idemstore.Key{Job: job, Period: before}).Validate(); err != nil {
		return idemstore.JobState{}, err
	}
	js := idemstore.JobState{Job: job}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.jobs+` (job, cursor_period, horizon) VALUES (?, ?, '')
			ON DUPLICATE KEY UPDATE cursor_period = IF(cursor_period = '', VALUES(cursor_period), cursor_period)`, job, before); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT cursor_period, horizon FROM `+l.t.jobs+` WHERE job = ?`, job).Scan(&js.Cursor, &js.Horizon)
	})
	if err != nil {
		return idemstore.JobState{}, fmt.Errorf("mysqlledger: start %q after %q: %w", job, before, err)
	}
	return js, nil
}

// Advance implements [idemstore.CatchUpStore].
func (l *Ledger) Advance(ctx context.Context, job, period string) error {
	if err := (idemstore.Key{Job: job, Period: period}).Validate(); err != nil {
		return err
	}
	if _, err := l.exec(ctx, l.advanceSQL(), job, period); err != nil {
		return fmt.Errorf("mysqlledger: advance %q to %q: %w", job, period, err)
	}
	return nil
}

// Prune implements [idemstore.CatchUpStore]: in one transaction, holding
// the job's row exclusively (claims and Resolve of the job's keys take it
// shared and wait), it checks and deletes the job's settled records at or
// before through, their items and re-run requests, and raises the job's
// horizon.
func (l *Ledger) Prune(ctx context.Context, job, through string) (int64, error) {
	if err := (idemstore.Key{Job: job, Period: through}).Validate(); err != nil {
		return 0, err
	}
	// The job's row must exist for its lock to keep claims out.
	if _, err := l.exec(ctx, `INSERT IGNORE INTO `+l.t.jobs+` (job, cursor_period, horizon) VALUES (?, '', '')`, job); err != nil {
		return 0, fmt.Errorf("mysqlledger: prune %q through %q: %w", job, through, err)
	}
	var deleted int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var cursor, horizon string
		if err := tx.QueryRowContext(ctx, `SELECT cursor_period, horizon FROM `+l.t.jobs+` WHERE job = ? FOR UPDATE`, job).Scan(&cursor, &horizon); err != nil {
			return err
		}
		var open int64
		var first sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT count(*), min(period) FROM `+l.t.runs+`
			WHERE job = ? AND period <= ? AND status NOT IN ('done', 'skipped')`, job, through).Scan(&open, &first); err != nil {
			return err
		}
		if err := idemstore.Prunable(job, through, cursor, open, first.String); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM `+l.t.runs+` WHERE job = ? AND period <= ? AND status IN ('done', 'skipped')`, job, through)
		if err != nil {
			return err
		}
		if deleted, err = res.RowsAffected(); err != nil {
			return err
		}
		for _, t := range []string{l.t.itemSet, l.t.itemChunks, l.t.itemLists, l.t.itemState, l.t.itemsets, l.t.reruns} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE job = ? AND period <= ?`, job, through); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE `+l.t.jobs+` SET horizon = GREATEST(horizon, ?) WHERE job = ?`, through, job)
		return err
	})
	if err != nil {
		if errors.Is(err, idemstore.ErrPruneRefused) {
			return 0, err
		}
		return 0, fmt.Errorf("mysqlledger: prune %q through %q: %w", job, through, err)
	}
	return deleted, nil
}

// List implements [idemstore.Lister]: the records that match f, ordered
// by job, then period (byte order). Times are the server's.
func (l *Ledger) List(ctx context.Context, f idemstore.Filter) ([]idemstore.Record, error) {
	q := `SELECT job, period, 0, ` + runCols + ` FROM ` + l.t.runs + ` WHERE (? = '' OR job = ?) AND (? = '' OR status = ?) ORDER BY job, period`
	args := []any{f.Job, f.Job, string(f.Status), string(f.Status)}
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysqlledger: list: %w", err)
	}
	defer rows.Close()
	recs := []idemstore.Record{}
	for rows.Next() {
		var r idemstore.Record
		var zero int64
		if err := scanRun(scanPrefix{rows, []any{&r.Key.Job, &r.Key.Period}}, &zero, &r); err != nil {
			return nil, fmt.Errorf("mysqlledger: list: %w", err)
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlledger: list: %w", err)
	}
	return recs, nil
}

// scanPrefix scans its own destinations before the caller's.
type scanPrefix struct {
	rows *sql.Rows
	pre  []any
}

func (s scanPrefix) Scan(dest ...any) error { return s.rows.Scan(append(s.pre, dest...)...) }
