package mysqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

var _ idemstore.FreshTxStore[*sql.Tx] = (*Ledger)(nil)

// peek reads the key's record and the server's time in one statement
// (one round trip, no transaction, no lock): what the record was at one
// moment (the statement's consistent read). found is false when the key
// has no record; then the job's horizon is not read.
func (l *Ledger) peek(ctx context.Context, key idemstore.Key) (s snapshot, found bool, err error) {
	s = snapshot{rec: idemstore.Record{Key: key}}
	var now int64
	err = scanRun(l.db.QueryRowContext(ctx, l.q.peek, key.Job, key.Period), &now, &s.rec)
	if errors.Is(err, sql.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	s.found, s.now = true, fromMicros(now)
	return s, true, nil
}

// quickClaim is Claim's first read: the key's status, fingerprint and
// value alone, by primary key. A done key or a fingerprint that does not
// match is settled: c is the answer. Otherwise found says whether the key
// has a record.
func (l *Ledger) quickClaim(ctx context.Context, req idemstore.ClaimRequest) (c idemstore.Claim, settled, found bool, err error) {
	var status, fp string
	var value []byte
	err = l.db.QueryRowContext(ctx, l.q.status, req.Key.Job, req.Key.Period).Scan(&status, &fp, &value)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return c, false, false, nil
	case err != nil:
		return c, false, false, err
	case idemstore.Mismatch(fp, req.Fingerprint):
		return idemstore.Claim{State: idemstore.ClaimMismatch, Record: idemstore.Record{Key: req.Key, Status: idemstore.Status(status), Fingerprint: fp}}, true, true, nil
	case idemstore.Status(status) == idemstore.StatusDone:
		return idemstore.Claim{State: idemstore.ClaimDone, Record: idemstore.Record{Key: req.Key, Status: idemstore.StatusDone, Fingerprint: fp, Value: value}}, true, true, nil
	}
	return c, false, true, nil
}

// settledBy is Claim's fast path: the answer from one read without a
// lock that found the key's record. A key that is not to be taken (done,
// skipped, parked, held by a live lease, waiting for its backoff) is
// answered from it, as it was at that moment; a key to take is claimed
// under its row lock. ok is false when the read says to take the key.
func (l *Ledger) settledBy(req idemstore.ClaimRequest, s snapshot) (idemstore.Claim, bool) {
	rec, found := s.view()
	r := req
	r.Now = s.now
	state, take, _ := idemstore.Decide(rec, found, r)
	if take {
		return idemstore.Claim{}, false
	}
	return idemstore.Claim{State: state, Record: inFrame(req, s.now, rec)}, true
}

// claimFirst is Claim's first round trip: the INSERT of attempt 1's
// claim (claimNew) while the last key claimed or run had no record, else
// the read of the key's status (quickClaim), followed by the INSERT if it
// found no record. ok says c is the answer: the key claimed, or settled
// (done, or its fingerprint does not match) by the read; otherwise Claim
// reads the record whole. An INSERT that finds a record (it fails with a
// duplicate key, writing nothing) makes the next keys read first, and
// one that records its key makes them insert first: a run of new keys
// (a Scheduler's periods) pays one statement per claim, a run of
// duplicate triggers one read each.
func (l *Ledger) claimFirst(ctx context.Context, req idemstore.ClaimRequest) (c idemstore.Claim, ok bool, err error) {
	if l.readFirst.Load() {
		c, settled, found, err := l.quickClaim(ctx, req)
		if err != nil || settled || found {
			return c, err == nil && settled, nil // an error: Claim's reads try again
		}
	}
	if ok, err := l.claimNew(ctx, req); err != nil || !ok {
		l.readFirst.Store(err == nil)
		return c, false, err
	}
	l.readFirst.Store(false)
	return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: idemstore.Record{Key: req.Key}}, true, nil
}

// freshInsertSQL: a template (see queries) that records a key that has no record as attempt 1, done,
// unless the job's horizon covers it (the job's row read under a shared
// lock, as Claim reads it: Prune holds it exclusively); a key that has a
// record fails with a duplicate key and writes nothing.
const freshInsertSQL = `INSERT INTO {runs} (job, period, status, attempt, failures, owner, lease_until, not_before,
		last_error, created, updated, fingerprint, value)
		SELECT ?, ?, 'done', 1, 0, ?, 0, 0, '', t.n, t.n, ?, NULL FROM (SELECT {now} AS n) AS t
		WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE job = ? AND horizon >= ? LOCK IN SHARE MODE)`

// claimNewSQL: a template (see queries) that records a key that has no
// record as attempt 1's claim, running, its lease (the 4th parameter, in
// microseconds) from the server's time, unless the job's horizon covers
// it (the job's row read under a shared lock, as Claim's transaction
// reads it: Prune holds it exclusively); a key that has a record fails
// with a duplicate key and writes nothing.
const claimNewSQL = `INSERT INTO {runs} (job, period, status, attempt, failures, owner, lease_until, not_before,
		last_error, created, updated, fingerprint, value)
		SELECT ?, ?, 'running', 1, 0, ?, t.n + ?, 0, '', t.n, t.n, ?, NULL FROM (SELECT {now} AS n) AS t
		WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE job = ? AND horizon >= ? LOCK IN SHARE MODE)`

// claimNew claims a key that had no record at its read as attempt 1, in
// one autocommitted statement (claimNewSQL). ok is false, with no error,
// when it wrote nothing: the key has a record now, the job's horizon
// covers it, or the statement was chosen as a deadlock's victim; Claim's
// transaction then decides.
func (l *Ledger) claimNew(ctx context.Context, req idemstore.ClaimRequest) (ok bool, err error) {
	key := req.Key
	res, err := l.db.ExecContext(ctx, l.q.claimNew, key.Job, key.Period, req.Owner, micros(req.Lease), req.Fingerprint, key.Job, key.Period)
	switch {
	case errno(err) == erDupEntry || retryable(err):
		return false, nil
	case err != nil:
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// queries are a ledger's statements, their table names filled in once.
type queries struct {
	peek, status, freshInsert, claimNew, finish, finishDone, advance, promote string
	takeRate                                                                  string
	markFresh                                                                 string // set by checkServer: the server's flavour
}

// markLockWait is how long, in seconds, MarkFresh's INSERT waits for a
// transaction that holds the key's row (InnoDB's least lock wait).
const markLockWait = 1

// markFreshSQL is freshInsert with a lock wait of markLockWait seconds
// for that statement alone: MariaDB's SET STATEMENT, MySQL's SET_VAR hint.
func markFreshSQL(freshInsert string, mariaDB bool) string {
	if mariaDB {
		return fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout = %d FOR %s", markLockWait, freshInsert)
	}
	return strings.Replace(freshInsert, "INSERT INTO", fmt.Sprintf("INSERT /*+ SET_VAR(innodb_lock_wait_timeout = %d) */ INTO", markLockWait), 1)
}

var _ idemstore.FreshMarker = (*Ledger)(nil)

// MarkFresh implements [idemstore.FreshMarker]: the period mark of
// idem.Each, once its items are settled. One autocommitted statement
// (freshInsertSQL, synced) writes the key's record as attempt 1, done,
// unless the key has a record or the job's horizon covers it; it waits at
// most markLockWait second for a transaction that holds the key's row,
// then returns the error (nothing was written). A key that has a record
// is then read (its status and fingerprint, by primary key): done for the
// caller too if it is done and the fingerprints match.
//
// Several holders that settle a period's last items at once each send it:
// one writes the record; the others' INSERT waits for its commit, fails on
// the duplicate key, and their read finds the key done: two round trips,
// and no wait for another holder's claim and done mark.
func (l *Ledger) MarkFresh(ctx context.Context, req idemstore.ClaimRequest) (bool, error) {
	key := req.Key
	if err := key.Validate(); err != nil {
		return false, err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, key); err != nil {
		return false, err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
		return false, err
	}
	res, err := l.db.ExecContext(ctx, l.q.markFresh, key.Job, key.Period, req.Owner, req.Fingerprint, key.Job, key.Period)
	switch {
	case errno(err) == erDupEntry:
		var status, fp string
		var value []byte
		if err := l.db.QueryRowContext(ctx, l.q.status, key.Job, key.Period).Scan(&status, &fp, &value); err != nil {
			return false, opErr("mark done", key, err)
		}
		return idemstore.Status(status) == idemstore.StatusDone && !idemstore.Mismatch(fp, req.Fingerprint), nil
	case retryable(err):
		return false, nil // a deadlock's victim wrote nothing: the usual way
	case err != nil:
		return false, opErr("mark done", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, opErr("mark done", key, err)
	}
	return n == 1, nil // 0: below the job's horizon
}

func newQueries(t tables) queries {
	r := strings.NewReplacer("{runs}", t.runs, "{jobs}", t.jobs, "{now}", nowSQL)
	return queries{
		peek:        `SELECT ` + nowSQL + `, ` + runCols + ` FROM ` + t.runs + ` WHERE job = ? AND period = ?`,
		status:      `SELECT status, fingerprint, value FROM ` + t.runs + ` WHERE job = ? AND period = ?`,
		freshInsert: r.Replace(freshInsertSQL),
		claimNew:    r.Replace(claimNewSQL),
		promote:     promoteSQL(t),
		takeRate:    takeRateSQLFor(t.limitRates),
		finish: `UPDATE ` + t.runs + ` SET status = ?, failures = ?,
		not_before = CASE WHEN ? IS NULL THEN 0 ELSE ` + nowSQL + ` + ? END,
		last_error = ?, lease_until = 0, updated = ` + nowSQL + `, value = ?
		WHERE job = ? AND period = ? AND attempt = ? AND status = 'running'`,
		finishDone: `UPDATE ` + t.runs + ` SET status = ?, failures = ?,
		not_before = CASE WHEN ? IS NULL THEN 0 ELSE ` + nowSQL + ` + ? END,
		last_error = ?, lease_until = 0, updated = ` + nowSQL + `, value = ?
		WHERE job = ? AND period = ? AND attempt = ? AND status = 'running' AND rerun_pending = 0`,
		advance: `INSERT INTO ` + t.jobs + ` (job, cursor_period, horizon) VALUES (?, ?, '')
		ON DUPLICATE KEY UPDATE cursor_period = GREATEST(cursor_period, VALUES(cursor_period))`,
	}
}

// ClaimFinishTx implements [idemstore.FreshTxStore]: for a key with no
// record, one READ COMMITTED transaction inserts the key's row as attempt
// 1 done (freshInsertSQL: the row's lock keeps every other attempt out
// until the commit), runs fn, stores fn's value (and moves the job's
// cursor with cursor) and commits: the claim, fn's writes and the done
// mark together, or nothing (a crash leaves no record). If fn fails, the
// transaction rolls back (fn's writes and the row) and attempt 1's claim
// is written as Claim writes a new key's (claimNewSQL: running, its lease
// from the server's time), in a statement of its own. Should another
// claim record the key in between (or Prune's horizon cover it), nothing
// is committed: the error says so, and the caller counts fn's run as a
// failed attempt 1 and claims the usual way. A key that has a record (or that the horizon covers) is
// claimed as by Claim: its INSERT wrote nothing, and the transaction rolls
// back. After such a key, the next ClaimFinishTx reads first, as Claim
// does (one round trip, no lock): a key with a record is then claimed, or
// answered if settled, without the transaction; one with none goes on as
// above, and the next one tries the INSERT first again.
func (l *Ledger) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(*sql.Tx) ([]byte, error)) (idemstore.Claim, bool, error) {
	key := req.Key
	if err := key.Validate(); err != nil {
		return idemstore.Claim{}, false, err
	}
	if l.readFirst.Load() {
		// The last key found a record: read first (one round trip, no
		// lock) rather than begin a transaction whose INSERT fails.
		s, found, err := l.peek(ctx, key)
		if err == nil && found {
			rec, found := s.view()
			r := req
			r.Now = s.now
			if state, take, _ := idemstore.Decide(rec, found, r); !take {
				return idemstore.Claim{State: state, Record: inFrame(req, s.now, rec)}, false, nil
			}
			c, err := l.Claim(ctx, req)
			return c, false, err
		}
	}
	inserted, done, fnErr, err := l.freshTx(ctx, req, cursor, fn)
	switch {
	case err != nil:
		return idemstore.Claim{}, false, opErr("run tx", key, err)
	case !inserted:
		l.readFirst.Store(true)
		c, err := l.Claim(ctx, req)
		return c, false, err
	}
	l.readFirst.Store(false)
	return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: idemstore.Record{Key: key}}, done, fnErr
}

// freshTx is ClaimFinishTx's transaction. inserted is false when the key
// has a record or the horizon covers it (nothing was written); fnErr is
// fn's error, the claim alone committed.
func (l *Ledger) freshTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(*sql.Tx) ([]byte, error)) (inserted, done bool, fnErr, err error) {
	key := req.Key
	tx, err := l.db.BeginTx(ctx, txOpts)
	if err != nil {
		return false, false, nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	res, err := tx.ExecContext(ctx, l.q.freshInsert, key.Job, key.Period, req.Owner, req.Fingerprint, key.Job, key.Period)
	switch {
	case errno(err) == erDupEntry || retryable(err):
		return false, false, nil, nil // the usual way: Claim
	case err != nil:
		return false, false, nil, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, false, nil, err
	} else if n == 0 {
		return false, false, nil, nil // below the horizon
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, key); err != nil {
		return true, false, nil, err
	}
	value, ferr := fn(tx)
	if ferr != nil {
		// fn's writes go with the row; attempt 1's claim is then written
		// on its own, as Claim writes a new key's (no savepoint: one round
		// trip less on the way every fresh run takes).
		if err := tx.Rollback(); err != nil {
			return true, false, nil, err
		}
		if ok, err := l.claimNew(ctx, req); err != nil {
			return true, false, nil, err
		} else if !ok {
			return true, false, nil, errors.New("the key was recorded by another claim (or pruned) after fn failed and its transaction rolled back")
		}
		return true, false, ferr, nil
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
		return true, false, nil, err
	}
	if value != nil {
		if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.runs+` SET value = ? WHERE job = ? AND period = ?`, value, key.Job, key.Period); err != nil {
			return true, false, nil, err
		}
	}
	if cursor {
		if _, err := tx.ExecContext(ctx, l.advanceSQL(), key.Job, key.Period); err != nil {
			return true, false, nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return true, false, nil, err
	}
	return true, true, nil, nil
}
