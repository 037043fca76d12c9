package pgledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/jackc/pgx/v5"
)

// snapshot is what one read of a key found, on the server's clock.
type snapshot struct {
	now     time.Time        // the server's clock at the read
	rec     idemstore.Record // the key's record, if found
	found   bool
	covered bool // the job's horizon covers the period: it counts as done
}

func (l *core) read(ctx context.Context, q conn, key idemstore.Key) (snapshot, error) {
	s := snapshot{rec: idemstore.Record{Key: key}}
	var status string
	var lease, notBefore, updated *time.Time
	err := q.queryRow(ctx, l.q.read, []any{key.Job, key.Period}, &s.now, &s.found, &status, &s.rec.Attempt,
		&s.rec.Failures, &s.rec.Owner, &lease, &notBefore, &s.rec.LastError, &updated, &s.covered, &s.rec.Fingerprint, &s.rec.Value, &s.rec.Revision)
	if err != nil {
		return snapshot{}, err
	}
	s.rec.Status = idemstore.Status(status)
	s.rec.LeaseUntil, s.rec.NotBefore, s.rec.Updated = deref(lease), deref(notBefore), deref(updated)
	return s, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// micros is d in microseconds, the unit the SQL statements take.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// view is the record that a claim or a resolution decides on: a period
// the job's horizon covers is done, record or not.
func (s snapshot) view() (rec idemstore.Record, found bool) {
	if !s.found && s.covered {
		return idemstore.Record{Key: s.rec.Key, Status: idemstore.StatusDone}, true
	}
	return s.rec, s.found
}

// decide is the claim rule ([idemstore.Decide]) applied to s, on the
// server's clock.
func decide(s snapshot, req idemstore.ClaimRequest) (state idemstore.ClaimState, take, doubt bool) {
	rec, found := s.view()
	return idemstore.Decide(rec, found, idemstore.ClaimRequest{Key: rec.Key, Now: s.now, TakeUnknown: req.TakeUnknown, Fingerprint: req.Fingerprint})
}

// inFrame expresses the deadlines of rec, read at the server's time now, on
// the claimer's clock (req.Now plus what remains of them on the server's
// clock), so that the engine's waits come out right whatever the clocks'
// difference.
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

// answer is the Claim for a snapshot that is not to be taken.
func answer(req idemstore.ClaimRequest, s snapshot, state idemstore.ClaimState) idemstore.Claim {
	rec, _ := s.view() // done if the horizon covers it
	return idemstore.Claim{State: state, Record: inFrame(req, s.now, rec)}
}

// Claim implements [idemstore.Store]. A key with no record is taken in
// one round trip on a pool: the job's shared advisory lock and the claim's
// INSERT, sent as one batch (one implicit transaction). A key that is
// done costs one primary-key read of its status, fingerprint and value,
// and no write; a key held by a live lease, backing off, unknown or
// parked, a read of the whole record (with the job's horizon and the
// server's time) and no write.
//
// Which comes first, the INSERT or the read, the ledger guesses from its
// recent claims: while most of them found their key done (triggers
// repeated after the work is done), the read; otherwise the INSERT, which
// a record or the job's horizon turns into nothing (then the record is
// read whole). A wrong guess costs one round trip more, never another
// answer. The INSERT first does not wait for another transaction on the
// key (a RunTx whose fn runs, a claim in flight) or for Prune's lock on the
// job more than [insertWait]: past that, it gives up, and the claim
// reads the record and decides on it, as when the read comes first.
//
// A lease whose holder's process is gone ([idemstore.HolderGone]: a process of
// this host that died) does not hold: the key is taken over at once, as if
// the lease had expired.
// Otherwise the key is taken with an UPDATE fenced by the attempt number
// the read found; if another claimer changed the record in between, the
// claim reads it again and decides anew.
//
// Leases are kept on the server's clock: req.Now is ignored, except that the
// LeaseUntil and NotBefore of the returned Record are expressed on the
// claimer's clock (req.Now plus what remains of them on the server's), so
// that a wait for them is right whatever the clocks' difference. Lookup
// returns the server's times. A claim with req.Durable commits
// synchronously; one without (AtLeastOnce) does not wait for its commit's
// WAL flush: the done mark's synchronous commit flushes the WAL through it
// (see take). A duplicate's answer for a done key carries only Key,
// Status, Fingerprint and Value, as idemstore.Claim allows.
func (l *core) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if err := req.Key.Validate(); err != nil {
		return idemstore.Claim{}, err
	}
	c, err := l.claim(ctx, req)
	if err == nil {
		l.dups.Saw(c.State == idemstore.ClaimDone)
	}
	return c, err
}

func (l *core) claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	first := !l.dups.Mostly() // the INSERT first, no read before it
	if !first {
		c, settled, found, err := l.fastClaim(ctx, req)
		if err != nil || settled {
			return c, err
		}
		if found {
			return l.claimRecorded(ctx, req)
		}
	}
	acquired, err := l.insertClaim(ctx, req, first)
	switch {
	case err == nil && acquired:
		return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: idemstore.Record{Key: req.Key}}, nil
	case err != nil && !lockTimedOut(err):
		return idemstore.Claim{}, l.opErr("claim", req.Key, err)
	}
	// Recorded (meanwhile), below the job's horizon, or locked: decide on
	// the record.
	return l.claimRecorded(ctx, req)
}

// claimRecorded is the claim of a key that has a record, or that the job's
// horizon covers: the whole record is read, and taken if the claim rule
// says so.
func (l *core) claimRecorded(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	s, err := l.read(ctx, l.db, req.Key)
	if err != nil {
		return idemstore.Claim{}, l.opErr("claim", req.Key, err)
	}
	if state, take, _ := decide(s, req); !take {
		return answer(req, s, state), nil
	}
	c, err := l.take(ctx, req, s)
	if err != nil {
		return idemstore.Claim{}, l.opErr("claim", req.Key, err)
	}
	return c, nil
}

// fastClaim is the claim's first read: the key's status, fingerprint and
// value alone, by primary key. A done key (the common duplicate trigger)
// or a fingerprint that does not match needs nothing more: settled, c is
// the answer (with the fields idemstore.Claim says a store may fill in
// alone). Otherwise found says whether the key has a record.
func (l *core) fastClaim(ctx context.Context, req idemstore.ClaimRequest) (c idemstore.Claim, settled, found bool, err error) {
	var (
		status, fp string
		value      []byte
	)
	err = l.db.queryRow(ctx, l.q.status, []any{req.Key.Job, req.Key.Period}, &status, &fp, &value)
	return l.fastAnswer(req, err, status, fp, value)
}

// fastAnswer is fastClaim's answer from the outcome of its read.
func (l *core) fastAnswer(req idemstore.ClaimRequest, err error, status, fp string, value []byte) (c idemstore.Claim, settled, found bool, _ error) {
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idemstore.Claim{}, false, false, nil // the claim's INSERT checks the horizon
	case err != nil:
		return idemstore.Claim{}, false, false, l.opErr("claim", req.Key, err)
	case idemstore.Mismatch(fp, req.Fingerprint):
		return idemstore.Claim{State: idemstore.ClaimMismatch, Record: idemstore.Record{Key: req.Key, Status: idemstore.Status(status), Fingerprint: fp}}, true, true, nil
	case idemstore.Status(status) == idemstore.StatusDone:
		return idemstore.Claim{State: idemstore.ClaimDone, Record: idemstore.Record{Key: req.Key, Status: idemstore.StatusDone, Fingerprint: fp, Value: value}}, true, true, nil
	}
	return idemstore.Claim{}, false, true, nil
}

// insertClaim takes a key that had no record as attempt 1, in one batch
// (one round trip on a pool, one implicit transaction): unless req.Durable,
// synchronous_commit off for this transaction (see take); the job's shared
// advisory lock (see take); the claim's INSERT, which a record or the job's
// horizon turns into nothing. It reports whether it inserted the record.
// The INSERT is a statement of its own, after the lock: it sees a horizon
// that a Prune committed while the claim waited for the lock.
//
// With first (no read before it), the batch waits for a lock at most
// insertWait: an error matching lockTimedOut says it gave up.
func (l *core) insertClaim(ctx context.Context, req idemstore.ClaimRequest, first bool) (bool, error) {
	lease := req.Lease
	if lease <= 0 {
		lease = idem.DefaultLease
	}
	pre := lockSharedSQL
	switch {
	case first && !req.Durable:
		pre = syncOffLockWaitSharedSQL
	case first:
		pre = lockWaitSharedSQL
	case !req.Durable:
		pre = syncOffLockSharedSQL
	}
	n, err := l.db.batch(ctx, []stmt{
		{query: pre, args: []any{l.lockID("job", req.Key.Job)}},
		{query: l.q.insert, args: []any{req.Key.Job, req.Key.Period, req.Owner, micros(lease), req.Fingerprint}},
	})
	if err != nil {
		return false, err
	}
	return n[1] == 1, nil
}

// MarkFresh implements [idemstore.FreshMarker]: the period mark of
// idem.Each, once its items are settled. One batch (one round trip on a
// pool, one implicit transaction, committed synchronously): the job's
// shared advisory lock (as a claim takes it, so that Prune never deletes
// a period it is writing), an INSERT of the record as done, which a
// record or the job's horizon turns into nothing, and a read of the key's
// status and fingerprint. Neither of the first two waits for a lock more
// than [insertWait]; past that, MarkFresh returns the error (error 55P03)
// and nothing was written.
//
// Several holders that settle a period's last items at once each send it:
// one writes the record; the others' INSERT waits for its commit, and
// their read, a statement of its own, finds the key done: done for them
// too, in the same round trip.
func (l *core) MarkFresh(ctx context.Context, req idemstore.ClaimRequest) (bool, error) {
	if err := req.Key.Validate(); err != nil {
		return false, err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, req.Key); err != nil {
		return false, err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, req.Key); err != nil {
		return false, err
	}
	var status, fp string
	var value []byte
	err := l.db.batchRow(ctx, []stmt{
		{query: lockWaitSharedSQL, args: []any{l.lockID("job", req.Key.Job)}},
		{query: l.q.insertDone, args: []any{req.Key.Job, req.Key.Period, req.Owner, req.Fingerprint}},
	}, l.q.status, []any{req.Key.Job, req.Key.Period}, &status, &fp, &value)
	switch {
	case errors.Is(err, sql.ErrNoRows): // below the job's horizon
		return false, nil
	case err != nil:
		return false, l.opErr("mark done", req.Key, err)
	}
	return idemstore.Status(status) == idemstore.StatusDone && !idemstore.Mismatch(fp, req.Fingerprint), nil
}

// insertWait is how long a claim's INSERT sent before any read waits for
// a lock (the key's row, held by another transaction; the job's advisory
// lock, held by Prune) before it gives up and the claim reads instead.
const insertWait = "5ms"

// lockTimedOut reports whether err is lock_not_available (55P03): a
// statement that gave up waiting for a lock after lock_timeout.
func lockTimedOut(err error) bool { return sqlState(err) == "55P03" }

// statementCanceled reports whether err is query_canceled (57014): a
// statement_timeout ran out, or (when the caller's context ended) the
// driver cancelled the statement.
func statementCanceled(err error) bool { return sqlState(err) == "57014" }

// take is the claim's write path, starting from what the fast path read.
func (l *core) take(ctx context.Context, req idemstore.ClaimRequest, s snapshot) (idemstore.Claim, error) {
	lease := req.Lease
	if lease <= 0 {
		lease = idem.DefaultLease
	}
	tx, err := l.db.begin(ctx)
	if err != nil {
		return idemstore.Claim{}, err
	}
	defer tx.rollback(context.WithoutCancel(ctx))
	// A claim that need not survive power loss (AtLeastOnce) does not wait
	// for its WAL flush: the done mark's synchronous commit flushes the WAL
	// through it anyway, so a fresh Run costs one WAL sync, not two.
	if !req.Durable {
		if _, err := tx.exec(ctx, syncOffSQL); err != nil {
			return idemstore.Claim{}, err
		}
	}
	// A shared lock on the job: Prune takes it exclusively, so no period it
	// could cover is being taken while it checks and deletes.
	if _, err := tx.exec(ctx, lockSharedSQL, l.lockID("job", req.Key.Job)); err != nil {
		return idemstore.Claim{}, err
	}
	for tries := 0; ; tries++ {
		state, take, doubt := decide(s, req)
		if !take {
			return answer(req, s, state), nil // nothing written; the rollback drops the lock
		}
		if tries == 1000 {
			return idemstore.Claim{}, errors.New("the record kept changing under the claim")
		}
		if !s.found {
			var attempt int64
			err := tx.queryRow(ctx, l.q.insert, []any{req.Key.Job, req.Key.Period, req.Owner, micros(lease), req.Fingerprint}, &attempt)
			if err == nil {
				if err := tx.commit(ctx); err != nil {
					return idemstore.Claim{}, err
				}
				return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: attempt, Record: idemstore.Record{Key: req.Key}}, nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return idemstore.Claim{}, err
			}
		} else {
			var attempt int64
			var failures int
			var lastErr string
			gone := "" // the owner of a running attempt whose lease holds: its process is gone (decide)
			if s.rec.Status == idemstore.StatusRunning && s.now.Before(s.rec.LeaseUntil) {
				gone = s.rec.Owner
			}
			err := tx.queryRow(ctx, l.q.take, []any{req.Key.Job, req.Key.Period, req.Owner, s.rec.Attempt,
				string(s.rec.Status), micros(lease), req.TakeUnknown, gone, idemstore.NoteDied, idemstore.NoteExpired, req.Fingerprint},
				&attempt, &failures, &lastErr)
			if err == nil {
				if err := tx.commit(ctx); err != nil {
					return idemstore.Claim{}, err
				}
				rec := s.rec
				rec.Failures, rec.LastError = failures, lastErr // an abandoned attempt counts already
				rec.Fingerprint = idemstore.KeptFingerprint(rec.Fingerprint, req.Fingerprint)
				return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: attempt, Doubt: doubt, Record: inFrame(req, s.now, rec)}, nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return idemstore.Claim{}, err
			}
		}
		// Another claimer (or Finish, Resolve) changed the record since it
		// was read: read it again. A new statement sees what they committed.
		if s, err = l.read(ctx, tx, req.Key); err != nil {
			return idemstore.Claim{}, err
		}
	}
}

// Renew implements [idemstore.Store]: the lease runs until the server's time plus
// lease (now is ignored).
func (l *core) Renew(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, lease time.Duration) error {
	n, err := l.db.exec(ctx, l.q.renew, key.Job, key.Period, attempt, micros(lease))
	if err != nil {
		return l.opErr("renew", key, err)
	}
	if n == 0 {
		return idemstore.LeaseLost(key, attempt)
	}
	return nil
}

// Finish implements [idemstore.Store]. A backoff deadline is kept on the server's
// clock: end.NotBefore - end.Now from the server's time. With end.Cursor, a
// done mark also moves the job's cursor forward to the period, in the same
// transaction.
func (l *core) Finish(ctx context.Context, key idemstore.Key, attempt int64, end idemstore.End) error {
	if err := end.Check("pgledger", key); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx) // a finished attempt must be recorded even if the caller gave up
	var backoff any                  // NULL: no deadline
	if d, ok := end.BackoffDelay(); ok {
		backoff = micros(d)
	}
	var value []byte // NULL: none
	if end.Status == idemstore.StatusDone {
		value = end.Value
	}
	args := []any{key.Job, key.Period, attempt, string(end.Status), end.Failures, backoff, end.Error, value}
	if !end.Cursor || end.Status != idemstore.StatusDone {
		n, err := l.db.exec(ctx, l.q.finish, args...)
		if err != nil {
			return l.opErr("finish", key, err)
		}
		if n == 0 {
			return idemstore.LeaseLost(key, attempt)
		}
		return nil
	}
	err := inTx(ctx, l.db, func(tx tx) error {
		n, err := tx.exec(ctx, l.q.finish, args...)
		if err != nil {
			return l.opErr("finish", key, err)
		}
		if n == 0 {
			return idemstore.LeaseLost(key, attempt)
		}
		if _, err := tx.exec(ctx, l.q.advance, key.Job, key.Period); err != nil {
			return l.opErr("finish: advance the cursor", key, err)
		}
		return nil
	})
	if err != nil && !errors.Is(err, idemstore.ErrLeaseLost) && !isOpErr(err) {
		return l.opErr("finish", key, err) // the commit failed
	}
	return err
}

// FinishTx implements [idemstore.TxStore]. Its first statement checks that
// attempt still holds the key and takes the key's row lock, which keeps
// every other attempt out until the transaction ends; then fn runs, the
// attempt is marked done (with cursor, the job's catch-up cursor moves
// forward to the period too), and the transaction commits. fn's error is
// returned as it is, and everything rolls back.
// fn's value is stored with the done mark.
//
// On a pgx pool it costs two round trips beside fn's own: BEGIN and the
// fence in one (see pipelinedFinishTx), the done mark and COMMIT in one.
func (l *Ledger) FinishTx(ctx context.Context, key idemstore.Key, attempt int64, now time.Time, cursor bool, fn func(pgx.Tx) ([]byte, error)) error {
	return l.pipelinedFinishTx(ctx, key, attempt, cursor, fn)
}

// finishTx is FinishTx on either connection; fn gets the adapter's
// transaction.
func (l *core) finishTx(ctx context.Context, key idemstore.Key, attempt int64, cursor bool, fn func(tx) ([]byte, error)) error {
	tx, err := l.db.begin(ctx)
	if err != nil {
		return l.opErr("run tx", key, err)
	}
	defer tx.rollback(context.WithoutCancel(ctx))
	n, err := tx.exec(ctx, l.q.fence, key.Job, key.Period, attempt)
	if err != nil {
		return l.opErr("run tx", key, err)
	}
	if n == 0 {
		return idemstore.LeaseLost(key, attempt)
	}
	value, err := fn(tx)
	if err != nil {
		return err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
		return err
	}
	n, err = tx.exec(ctx, l.q.finish, key.Job, key.Period, attempt, string(idemstore.StatusDone), 0, nil, "", value)
	if err != nil {
		return l.opErr("run tx: done mark", key, err)
	}
	if n == 0 { // cannot happen while the row lock is held
		return idemstore.LeaseLost(key, attempt)
	}
	if cursor {
		if _, err := tx.exec(ctx, l.q.advance, key.Job, key.Period); err != nil {
			return l.opErr("run tx: advance the cursor", key, err)
		}
	}
	if err := tx.commit(ctx); err != nil {
		return l.opErr("run tx: commit", key, err)
	}
	return nil
}

// Resolve implements [idemstore.Store]: it settles a key by hand.
// [idem.ResolveDone] marks it done (the work did happen);
// [idem.ResolveRetry] makes it runnable at once with its failure count
// cleared (the work did not happen); [idem.ResolveSkip] settles it as
// skipped. It refuses, with [idemstore.ErrNotResolvable], a key that is done
// (also by the job's horizon) or held by a live attempt, and a retry of a
// key that has no record.
func (l *core) Resolve(ctx context.Context, key idemstore.Key, to idemstore.Resolution) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	err := inTx(ctx, l.db, func(tx tx) error {
		if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, l.lockID("job", key.Job)); err != nil {
			return err
		}
		for {
			s, err := l.read(ctx, tx, key)
			if err != nil {
				return err
			}
			if s.found {
				// Lock the row: nothing changes it between the check and the write.
				var status string
				var lease, notBefore, updated *time.Time
				err := tx.queryRow(ctx, l.q.lockRow, []any{key.Job, key.Period}, &s.now, &status, &s.rec.Attempt,
					&s.rec.Failures, &s.rec.Owner, &lease, &notBefore, &s.rec.LastError, &updated, &s.rec.Fingerprint, &s.rec.Value, &s.rec.Revision)
				if errors.Is(err, sql.ErrNoRows) {
					continue // deleted in between (pruned): read again
				}
				if err != nil {
					return err
				}
				s.rec.Status = idemstore.Status(status)
				s.rec.LeaseUntil, s.rec.NotBefore, s.rec.Updated = deref(lease), deref(notBefore), deref(updated)
			}
			rec, found := s.view()
			if err := idemstore.Resolvable(rec, found, to, s.now); err != nil {
				return err
			}
			status, note := idemstore.Resolved(s.rec, to)
			q := l.q.resolveUpdate
			if !s.found {
				q = l.q.resolveInsert
			}
			n, err := tx.exec(ctx, q, key.Job, key.Period, string(status), note)
			if err != nil {
				return err
			}
			if n == 1 {
				return l.wake(ctx, tx, key.Job) // the Schedulers look at the job at once
			}
			// A claim inserted the record in between: decide on it.
		}
	})
	if err != nil && !errors.Is(err, idemstore.ErrNotResolvable) {
		return l.opErr("resolve", key, err)
	}
	return err
}

// Lookup implements [idemstore.Store]: it returns the key's record. A period that
// has no record but that the job's horizon covers (it was pruned) is
// reported done. Times are the server's.
func (l *core) Lookup(ctx context.Context, key idemstore.Key) (idemstore.Record, bool, error) {
	if err := key.Validate(); err != nil {
		return idemstore.Record{}, false, err
	}
	s, err := l.read(ctx, l.db, key)
	if err != nil {
		return idemstore.Record{}, false, l.opErr("lookup", key, err)
	}
	switch {
	case s.found:
		return s.rec, true, nil
	case s.covered:
		return idemstore.Record{Key: key, Status: idemstore.StatusDone}, true, nil
	}
	return idemstore.Record{Key: key}, false, nil
}

// Job implements [idemstore.CatchUpStore]: the job's catch-up cursor and
// retention horizon ("" when none).
func (l *core) Job(ctx context.Context, job string) (idemstore.JobState, error) {
	js := idemstore.JobState{Job: job}
	err := l.db.queryRow(ctx, l.q.job, []any{job}, &js.Cursor, &js.Horizon)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return idemstore.JobState{}, fmt.Errorf("pgledger: job %q: %w", job, err)
	}
	return js, nil
}

// Start implements [idemstore.CatchUpStore]: it sets the job's cursor to
// before unless the job has one, and reads the job back, in one
// transaction. Of concurrent first calls, the first to commit sets the
// start; the others read it.
func (l *core) Start(ctx context.Context, job, before string) (idemstore.JobState, error) {
	if err := (idemstore.Key{Job: job, Period: before}).Validate(); err != nil {
		return idemstore.JobState{}, err
	}
	js := idemstore.JobState{Job: job}
	err := inTx(ctx, l.db, func(tx tx) error {
		if _, err := tx.exec(ctx, l.q.start, job, before); err != nil {
			return err
		}
		// A new statement: it sees a start another call committed meanwhile.
		return tx.queryRow(ctx, l.q.job, []any{job}, &js.Cursor, &js.Horizon)
	})
	if err != nil {
		return idemstore.JobState{}, fmt.Errorf("pgledger: start %q after %q: %w", job, before, err)
	}
	return js, nil
}

// Advance implements [idemstore.CatchUpStore]: it moves the job's cursor forward
// to period (byte order, as Go compares strings); a cursor at or after
// period stays.
func (l *core) Advance(ctx context.Context, job, period string) error {
	if err := (idemstore.Key{Job: job, Period: period}).Validate(); err != nil {
		return err
	}
	if _, err := l.db.exec(ctx, l.q.advance, job, period); err != nil {
		return fmt.Errorf("pgledger: advance %q to %q: %w", job, period, err)
	}
	return nil
}

// Prune implements [idemstore.CatchUpStore]: in one transaction it deletes the
// job's done and skipped records at or before through and raises the job's
// horizon to through. It refuses ([idemstore.ErrPruneRefused], nothing deleted)
// a through after the job's cursor when the job has one, and a through that
// would cover a record that is not settled. While it runs, claims of the
// job's keys wait for it.
func (l *core) Prune(ctx context.Context, job, through string) (int64, error) {
	if err := (idemstore.Key{Job: job, Period: through}).Validate(); err != nil {
		return 0, err
	}
	var deleted int64
	err := inTx(ctx, l.db, func(tx tx) error {
		// Exclusive: no claim or Resolve of the job is between its read and
		// its write while the records are checked and deleted.
		if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, l.lockID("job", job)); err != nil {
			return err
		}
		var cursor string
		err := tx.queryRow(ctx, l.q.pruneCursor, []any{job}, &cursor)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var open int64
		var first string
		if err := tx.queryRow(ctx, l.q.pruneOpen, []any{job, through}, &open, &first); err != nil {
			return err
		}
		if err := idemstore.Prunable(job, through, cursor, open, first); err != nil {
			return err
		}
		n, err := tx.exec(ctx, l.q.prune, job, through)
		if err != nil {
			return err
		}
		deleted = n
		// The item records of those periods (Each), their history of
		// attempts and their re-run requests go with them.
		for _, t := range []string{"item_set", "item_chunks", "item_lists", "item_state", "itemsets", "attempts", "reruns"} {
			q := `DELETE FROM ` + pgx.Identifier{l.schema, t}.Sanitize() + ` WHERE job = $1 AND period <= $2 COLLATE "C"`
			if _, err := tx.exec(ctx, q, job, through); err != nil {
				return err
			}
		}
		_, err = tx.exec(ctx, l.q.pruneJobs, job, through)
		return err
	})
	if err != nil {
		if errors.Is(err, idemstore.ErrPruneRefused) {
			return 0, err
		}
		return 0, fmt.Errorf("pgledger: prune %q through %q: %w", job, through, err)
	}
	return deleted, nil
}

// List implements [idemstore.Lister]: the records that match f, ordered by job,
// then period (byte order). Times are the server's.
func (l *core) List(ctx context.Context, f idemstore.Filter) ([]idemstore.Record, error) {
	var limit any // NULL: no limit
	if f.Limit > 0 {
		limit = int64(f.Limit)
	}
	recs := []idemstore.Record{}
	err := l.db.query(ctx, l.q.list, []any{f.Job, string(f.Status), limit}, func(scan func(...any) error) error {
		var r idemstore.Record
		var status string
		var lease, notBefore, updated *time.Time
		err := scan(&r.Key.Job, &r.Key.Period, &status, &r.Attempt, &r.Failures, &r.Owner,
			&lease, &notBefore, &r.LastError, &updated, &r.Fingerprint, &r.Value, &r.Revision)
		r.Status = idemstore.Status(status)
		r.LeaseUntil, r.NotBefore, r.Updated = deref(lease), deref(notBefore), deref(updated)
		recs = append(recs, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgledger: list: %w", err)
	}
	return recs, nil
}

// opError is an error of the database, with the operation and key.
type opError struct {
	op  string
	key idemstore.Key
	err error
}

func (e *opError) Error() string {
	return "pgledger: " + e.op + " " + e.key.String() + ": " + e.err.Error()
}
func (e *opError) Unwrap() error { return e.err }

func (l *core) opErr(op string, key idemstore.Key, err error) error {
	return &opError{op: op, key: key, err: err}
}

func isOpErr(err error) bool {
	var e *opError
	return errors.As(err, &e)
}
