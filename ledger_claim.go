package idem

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// Claim implements [idemstore.Store]. The claim reads the key's status
// first (fastClaim), which is all that a done key needs; when the recent
// claims found their keys new (readFirst says no), it goes straight to the
// claim's transaction, which reads the record under the write lock when
// the key has one. That transaction waits only behind this process's
// writes of the ledger's own (claims, done marks, ...): if SQLite's write
// lock is held by another handle, or this process's turn by a transaction
// of a caller's function, the claim reads first after all, so that a done
// key is answered without waiting for such a writer. The answer is the
// same either way.
func (l ledgerStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if !l.readFirst() {
		c, err := l.claimTx(ctx, req, true)
		if !errors.Is(err, errNotNow) {
			l.sawDone(c, err)
			return c, err
		}
	}
	c, settled, _, err := l.fastClaim(ctx, req)
	if err != nil || settled {
		l.sawDone(c, err)
		return c, err
	}
	c, err = l.claimTx(ctx, req, false)
	l.sawDone(c, err)
	return c, err
}

// readFirst: most of the ledger's recent claims found their key done
// (dupes.Recent), or the ledger is attached (NewLedger: no kept
// connection, so no claim transaction that can be tried without waiting),
// so the next claim reads the key's status before any write. A run of new
// keys goes to the claim's transaction at once within a few claims, and a
// run of duplicates back to the read alone.
func (l *Ledger) readFirst() bool { return !l.kept || l.dups.Mostly() }

// sawDone counts claim c (answered with err) for readFirst.
func (l *Ledger) sawDone(c idemstore.Claim, err error) {
	if err == nil {
		l.dups.Saw(c.State == idemstore.ClaimDone)
	}
}

// fastClaim is the claim's fast path: one prepared primary-key read of the
// status alone (each column read costs modernc.org/sqlite a name and a type
// lookup) when the record keeps no fingerprint and no value; a record that
// does (and a call with WithParams) is read with those. A done key, the common duplicate trigger, needs nothing more; a
// live lease, a backoff or a parked key need the whole record, and no
// write: settled, c is the answer. Otherwise the key is to be taken by
// claimTx; found says whether it has a record.
//
// The read runs on the kept write connection when no write of this process
// holds it: see scanRead.
func (l *Ledger) fastClaim(ctx context.Context, req idemstore.ClaimRequest) (c idemstore.Claim, settled, found bool, err error) {
	var rd struct { // one allocation for the three (Scan takes pointers)
		status, fp string
		value      []byte
	}
	args := []any{req.Key.Job, req.Key.Period}
	if req.Fingerprint == "" {
		// '' for a record with a fingerprint or a value: read again below.
		err = busyRetry(ctx, func() error {
			return l.scanRead(ctx, `SELECT CASE WHEN fingerprint = '' AND value IS NULL THEN status ELSE '' END
				FROM idem_runs WHERE job=? AND period=?`, args, &rd.status)
		})
	}
	if req.Fingerprint != "" || (err == nil && rd.status == "") {
		err = busyRetry(ctx, func() error {
			return l.scanRead(ctx, `SELECT status, fingerprint, value FROM idem_runs WHERE job=? AND period=?`, args, &rd.status, &rd.fp, &rd.value)
		})
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idemstore.Claim{}, false, false, nil // the claim's INSERT checks the horizon
	case err != nil:
		return idemstore.Claim{}, false, false, l.opErr("claim", req.Key, err)
	case idemstore.Mismatch(rd.fp, req.Fingerprint):
		return idemstore.Claim{State: idemstore.ClaimMismatch, Record: Record{Key: req.Key, Status: Status(rd.status), Fingerprint: rd.fp}}, true, true, nil
	case Status(rd.status) == StatusDone:
		return idemstore.Claim{State: idemstore.ClaimDone, Record: Record{Key: req.Key, Status: StatusDone, Fingerprint: rd.fp, Value: rd.value}}, true, true, nil
	}
	rec, found, err := l.record(ctx, req.Key)
	if err != nil {
		return idemstore.Claim{}, false, false, l.opErr("claim", req.Key, err)
	}
	if state, take, _ := idemstore.Decide(rec, found, req); !take {
		return idemstore.Claim{State: state, Record: rec}, true, found, nil
	}
	return idemstore.Claim{}, false, found, nil
}

// claimTx takes the key for a new attempt in a write transaction, deciding
// again under the write lock. With now, it fails with errNotNow instead of
// waiting for the lock (writeTx).
func (l *Ledger) claimTx(ctx context.Context, req idemstore.ClaimRequest, now bool) (idemstore.Claim, error) {
	var c idemstore.Claim
	f := func(tx *wtx) error {
		// The claim's time is the request's moved forward by the wait for
		// the write lock: its lease counts from when it is written.
		at := tx.at(req.Now)
		now := micros(at)
		until := micros(at.Add(req.Lease))
		res, err := tx.exec(claimInsertSQL, req.Key.Job, req.Key.Period, req.Owner, until, now, now, now, req.Fingerprint, req.Key.Job, req.Key.Period)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			c = idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: Record{Key: req.Key}, Now: at}
			return nil
		}
		// The row exists: decide again under the write lock.
		rec, found, err := scanRecord(req.Key, tx.queryRow(selectRecord, req.Key.Job, req.Key.Period))
		if err != nil {
			return err
		}
		if !found { // not inserted and no row: below the job's horizon
			c = idemstore.Claim{State: idemstore.ClaimDone, Record: Record{Key: req.Key, Status: StatusDone}}
			return nil
		}
		treq := req
		treq.Now = at
		state, take, doubt := idemstore.Decide(rec, found, treq)
		c = idemstore.Claim{State: state, Record: rec}
		if !take {
			return nil
		}
		c.Attempt, c.Doubt, c.Record, c.Now = rec.Attempt+1, doubt, idemstore.TakenOver(rec, at), at
		if rec.Status == StatusRunning {
			// The attempt taken over ended without an outcome.
			if _, err := tx.exec(abandonedInsertSQL, now, req.Key.Job, req.Key.Period); err != nil {
				return err
			}
		}
		_, err = tx.exec(`UPDATE idem_runs SET status='running', attempt=?, failures=?, owner=?,
			lease_until=?, not_before=0, last_error=?, updated=?, started=?, fingerprint=? WHERE job=? AND period=?`,
			c.Attempt, c.Record.Failures, req.Owner, until, c.Record.LastError, now, now,
			idemstore.KeptFingerprint(rec.Fingerprint, req.Fingerprint), req.Key.Job, req.Key.Period)
		return err
	}
	// In a group, the claim's INSERT may go with other claims' (its row as
	// f's INSERT writes it); a key it did not insert runs f.
	var at time.Time
	b := &batchRow{kind: batchClaim, key: req.Key,
		args: func(tx *wtx) []any {
			at = tx.at(req.Now)
			return []any{req.Key.Job, req.Key.Period, req.Owner, micros(at.Add(req.Lease)), micros(at), req.Fingerprint}
		},
		hit: func() {
			c = idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: Record{Key: req.Key}, Now: at}
		},
		miss: f,
	}
	err := l.writeTxBatch(ctx, req.Durable, now, f, b)
	if errors.Is(err, errNotNow) {
		return idemstore.Claim{}, err
	}
	if err != nil {
		return idemstore.Claim{}, l.opErr("claim", req.Key, err)
	}
	return c, nil
}

// Renew implements [idemstore.Store]. The new lease counts from when it is
// written: now moved forward by the renewal's wait for the write lock.
func (l ledgerStore) Renew(ctx context.Context, key Key, attempt int64, now time.Time, lease time.Duration) error {
	var n int64
	err := l.withTx(ctx, true, func(tx *wtx) error {
		at := tx.at(now)
		res, err := tx.exec(`UPDATE idem_runs SET lease_until=?, updated=?
			WHERE job=? AND period=? AND attempt=? AND status='running'`,
			micros(at.Add(lease)), micros(at), key.Job, key.Period, attempt)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return l.opErr("renew", key, err)
	}
	if n == 0 {
		return idemstore.LeaseLost(key, attempt)
	}
	return nil
}

// Finish implements [idemstore.Store]. It always commits with synchronous=FULL.
func (l ledgerStore) Finish(ctx context.Context, key Key, attempt int64, end idemstore.End) error {
	var n int64
	f := func(tx *wtx) error {
		var err error
		if n, err = finishExec(tx, key, attempt, end); err != nil || n == 0 {
			return err
		}
		if end.Cursor && end.Status == StatusDone {
			return advanceExec(tx, key.Job, key.Period)
		}
		return nil
	}
	// In a group, a done mark that moves no cursor may go with others'
	// (its row as finishExec's UPDATE writes it).
	var b *batchRow
	if !end.Cursor || end.Status != StatusDone {
		b = &batchRow{kind: batchDone, key: key,
			args: func(tx *wtx) []any {
				return append([]any{key.Job, key.Period, attempt}, finishValues(tx, end)...)
			},
			hit:  func() { n = 1 },
			miss: func(*wtx) error { n = 0; return nil },
		}
	}
	err := l.writeTxBatch(ctx, true, false, f, b)
	if err != nil {
		return l.opErr("finish", key, err)
	}
	if n == 0 {
		return idemstore.LeaseLost(key, attempt)
	}
	return nil
}

func finishExec(tx *wtx, key Key, attempt int64, end idemstore.End) (int64, error) {
	// The attempt's history row is the record itself until the record
	// moves on (the trigger idem_attempt_archive).
	res, err := tx.exec(`UPDATE idem_runs SET status=?, failures=?, not_before=?, last_error=?,
		lease_until=0, updated=?, value=? WHERE job=? AND period=? AND attempt=? AND status='running'`,
		append(finishValues(tx, end), key.Job, key.Period, attempt)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// finishValues are the values an attempt's end writes on its record:
// status, failures, not_before, last_error, updated, value.
func finishValues(tx *wtx, end idemstore.End) []any {
	var value []byte
	if end.Status == StatusDone {
		value = end.Value
	}
	return []any{string(end.Status), end.Failures, micros(tx.at(end.NotBefore)), end.Error, micros(tx.at(end.Now)), value}
}

func advanceExec(tx *wtx, job, period string) error {
	_, err := tx.exec(`INSERT INTO idem_jobs(job, cursor) VALUES(?, ?)
		ON CONFLICT(job) DO UPDATE SET cursor = excluded.cursor WHERE excluded.cursor > idem_jobs.cursor`, job, period)
	return err
}

// claimInsertSQL records a key that has no record as attempt 1, running,
// unless the key is at or below its job's retention horizon.
const claimInsertSQL = `INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated, started, fingerprint)
	SELECT ?, ?, 'running', 1, ?, ?, ?, ?, ?, ?
	WHERE NOT EXISTS (SELECT 1 FROM idem_jobs WHERE job = ? AND horizon >= ?)
	ON CONFLICT DO NOTHING`

// claimDoneInsertSQL records a key that has no record as attempt 1, done,
// unless the key is at or below its job's retention horizon: a RunTx
// key's claim and done mark in one statement, inside the transaction that
// runs fn.
const claimDoneInsertSQL = `INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated, started, fingerprint)
	SELECT ?, ?, 'done', 1, ?, 0, ?, ?, ?, ?
	WHERE NOT EXISTS (SELECT 1 FROM idem_jobs WHERE job = ? AND horizon >= ?)
	ON CONFLICT DO NOTHING`

// ClaimFinishTx implements [idemstore.FreshTxStore]: for a key with no record,
// the key's row inserted as attempt 1 done (claimDoneInsertSQL), fn (in a
// savepoint; if it fails, its writes are rolled back and the row becomes
// attempt 1's claim, as Claim writes it) and the value, in one SQLite
// transaction, committed with synchronous=FULL. The transaction holds SQLite's
// write lock from the INSERT on, so no other attempt can claim the key
// meanwhile, and a crash leaves no record at all. A key with a record (a
// duplicate trigger, most often) is claimed as by Claim, after the same single
// read and without the write lock when it is done. As in Claim, when the
// recent claims found their keys new, the transaction comes first, if it can
// start at once; a key that turns out to have a record is then read as
// above, the transaction having written nothing.
func (l ledgerStore) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(*sql.Tx) ([]byte, error)) (idemstore.Claim, bool, error) {
	if !l.readFirst() {
		c, done, err := l.claimFinishTx(ctx, req, cursor, fn, true)
		if !errors.Is(err, errNotNow) {
			return c, done, err
		}
	}
	c, settled, found, err := l.fastClaim(ctx, req)
	switch {
	case err != nil || settled:
		l.sawDone(c, err)
		return c, false, err
	case found:
		c, err := l.claimTx(ctx, req, false)
		l.sawDone(c, err)
		return c, false, err
	}
	return l.claimFinishTx(ctx, req, cursor, fn, false)
}

// claimFinishTx is ClaimFinishTx's transaction, for a key found without a
// record, or (now) not read yet: then it fails with errNotNow, having
// written nothing, if the transaction cannot start at once or the key has a
// record.
func (l *Ledger) claimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(*sql.Tx) ([]byte, error), now bool) (idemstore.Claim, bool, error) {
	key := req.Key
	var (
		inserted bool
		fnErr    error
	)
	err := l.sqlTx(ctx, true, now, func(tx *wtx) error {
		inserted, fnErr = false, nil
		at := tx.at(req.Now)
		now, until := micros(at), micros(at.Add(req.Lease))
		// The row goes in as done at once: nothing outside this
		// transaction sees it before the commit, and fn's failure turns
		// it into the claim below. That spares the done mark's UPDATE.
		res, err := tx.exec(claimDoneInsertSQL, key.Job, key.Period, req.Owner, now, now, now, req.Fingerprint, key.Job, key.Period)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // recorded meanwhile, or below the horizon: nothing written
		}
		inserted = true
		if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, key); err != nil {
			return err
		}
		if _, err := tx.exec(`SAVEPOINT idem_fn`); err != nil {
			return err
		}
		value, ferr := fn(tx.Tx)
		if ferr != nil {
			// fn's writes go; the claim stays, and is committed.
			if _, err := tx.exec(`ROLLBACK TO idem_fn`); err != nil {
				return err
			}
			if _, err := tx.exec(`RELEASE idem_fn`); err != nil {
				return err
			}
			// The claim of attempt 1, as Claim writes it.
			_, err := tx.exec(`UPDATE idem_runs SET status='running', lease_until=? WHERE job=? AND period=?`, until, key.Job, key.Period)
			fnErr = ferr
			return err
		}
		if _, err := tx.exec(`RELEASE idem_fn`); err != nil {
			return err
		}
		if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
			return err
		}
		if value != nil {
			if _, err := tx.exec(`UPDATE idem_runs SET value=? WHERE job=? AND period=?`, value, key.Job, key.Period); err != nil {
				return err
			}
		}
		if !cursor {
			return nil
		}
		return advanceExec(tx, key.Job, key.Period)
	})
	switch {
	case errors.Is(err, errNotNow):
		return idemstore.Claim{}, false, err
	case err != nil:
		return idemstore.Claim{}, false, l.opErr("run tx", key, err)
	case !inserted && now:
		return idemstore.Claim{}, false, errNotNow // the usual way: read first
	case !inserted:
		c, err := l.claimTx(ctx, req, false) // decides under the write lock
		l.sawDone(c, err)
		return c, false, err
	}
	l.sawDone(idemstore.Claim{State: idemstore.ClaimAcquired}, nil)
	return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: Record{Key: key}}, fnErr == nil, fnErr
}

// FinishTx implements [idemstore.TxStore]: fn's writes and the done mark (and,
// with cursor, the job's catch-up cursor) commit in one SQLite transaction,
// with synchronous=FULL. The transaction holds SQLite's write lock from its
// first statement until it ends, so keep fn short: other writers to the file
// wait for it.
func (l ledgerStore) FinishTx(ctx context.Context, key Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) ([]byte, error)) error {
	err := l.withSQLTx(ctx, true, func(tx *wtx) error {
		// First statement: a write, which takes the lock and checks the fence.
		res, err := tx.exec(`UPDATE idem_runs SET updated=? WHERE job=? AND period=? AND attempt=? AND status='running'`,
			micros(tx.at(now)), key.Job, key.Period, attempt)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return idemstore.LeaseLost(key, attempt)
		}
		value, err := fn(tx.Tx)
		if err != nil {
			return err
		}
		if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
			return err
		}
		if _, err := finishExec(tx, key, attempt, idemstore.End{Status: StatusDone, Now: now, Value: value}); err != nil || !cursor {
			return err
		}
		return advanceExec(tx, key.Job, key.Period)
	})
	if err != nil {
		return l.opErr("run tx", key, err)
	}
	return nil
}
