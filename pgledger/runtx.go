package pgledger

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pipelinedFinishTx is FinishTx on a pgx pool, in two round trips beside
// fn's own, where finishTx takes four (BEGIN, the fence, the done mark,
// COMMIT):
//
//  1. BEGIN and the done mark, which is also the fence (see fenceMust), in
//     one batch (pgx's Batch.BeginTx, so fn still gets a pgx.Tx of pgx's
//     own), with the cursor's advance if asked.
//  2. After fn, COMMIT (with the UPDATE of the value fn returned, if any,
//     in the same batch).
//
// The done mark is written first, in fn's transaction: it takes the row
// lock that keeps every other attempt out until COMMIT, and checks that
// attempt still holds the key (it fails on purpose when it changes no row,
// and fn does not run: idemstore.ErrLeaseLost). Other connections see the
// key running until COMMIT, and nothing of it if fn fails or the process
// dies: the transaction rolls back, mark included, exactly as when the
// mark came after fn.
func (l *Ledger) pipelinedFinishTx(ctx context.Context, key idemstore.Key, attempt int64, cursor bool, fn func(pgx.Tx) ([]byte, error)) (err error) {
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return l.opErr("run tx", key, err)
	}
	conn := c.Conn()
	defer releaseIdle(ctx, conn, c.Release)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	l.queueFence(b, key, attempt, cursor)
	tx, err := sendTxBatch(ctx, conn, b)
	if err != nil {
		if isMustFail(err, "fence") {
			return idemstore.LeaseLost(key, attempt)
		}
		return l.opErr("run tx", key, err)
	}
	value, err := fn(tx)
	if err != nil {
		return err
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
		return err
	}
	return l.commitTx(ctx, conn, key, attempt, value)
}

// queueFence queues the fence of fn's transaction: the done mark of
// attempt, which fails unless it changed the row (fenceMust), and the
// cursor's advance if asked.
func (l *core) queueFence(b *pgx.Batch, key idemstore.Key, attempt int64, cursor bool) {
	b.Queue(l.q.fenceMust, key.Job, key.Period, attempt, string(idemstore.StatusDone), 0, nil, "", nil)
	if cursor {
		b.Queue(l.q.advance, key.Job, key.Period)
	}
}

// releaseIdle returns conn to its pool (release) after rolling back a
// transaction that an error left open on it; the pool drops a connection
// that cannot be rolled back.
func releaseIdle(ctx context.Context, conn *pgx.Conn, release func()) {
	if conn.PgConn().TxStatus() != 'I' && !conn.IsClosed() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "rollback"); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}
	release()
}

// commitTx commits fn's transaction on conn, whose done mark is written,
// with the value fn returned (one more UPDATE in the same batch, if any).
func (l *Ledger) commitTx(ctx context.Context, conn *pgx.Conn, key idemstore.Key, attempt int64, value []byte) error {
	if conn.PgConn().TxStatus() != 'T' {
		// fn committed or rolled back the transaction itself, or left it
		// failed: nothing of it may be marked done.
		return l.opErr("run tx", key, errors.New("fn ended or broke the transaction it was given (pgx.Tx): not committed"))
	}
	var tag pgconn.CommandTag
	var err error
	if value == nil {
		tag, err = conn.Exec(ctx, "commit")
	} else {
		b := &pgx.Batch{}
		b.Queue(l.q.setValue, key.Job, key.Period, attempt, value)
		b.Queue("commit")
		br := conn.SendBatch(ctx, b)
		if _, err = br.Exec(); err == nil {
			tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return l.opErr("run tx: commit", key, err)
	}
	if tag.String() != "COMMIT" {
		return l.opErr("run tx: commit", key, pgx.ErrTxCommitRollback)
	}
	return nil
}

// ClaimFinishTx implements [idemstore.FreshTxStore] for RunTx, keeping
// the claim a transaction of its own, committed before fn's begins (see
// [idemstore.ClaimFirst]): while fn runs, every other connection sees the
// key running, and a crash during fn leaves attempt 1 counted, exactly as
// after Claim and FinishTx. It takes three round trips beside fn's own
// where Claim and FinishTx take six:
//
//  1. One batch of prepared statements, which begins fn's pgx transaction
//     (Batch.BeginTx): BEGIN, synchronous_commit off for the claim (an
//     AtLeastOnce claim does not wait for its WAL flush: the done mark's
//     commit flushes through it), the job's shared advisory lock (Prune's
//     exclusion, as in Claim), the claim's INSERT (a statement of its own
//     after the lock, as in Claim), COMMIT AND CHAIN; then the fence of
//     fn's transaction, as in FinishTx: the done mark of attempt 1, which
//     holds the row lock until COMMIT (and the cursor's advance). The INSERT skips a key that has a record (read with the
//     statement's snapshot, so it never waits for a transaction that holds
//     the row) or that the job's horizon covers, and fails on purpose then
//     (mustOne): nothing was committed, and the claim goes on as Claim's,
//     after a ROLLBACK sent in one batch with Claim's first read. A
//     duplicate trigger of RunTx thus costs two round trips (Run's, one).
//  2. fn.
//  3. COMMIT (with the value fn returned, as in FinishTx).
//
// If fn fails, its transaction rolls back and the claim stays: the engine
// records the failure as after FinishTx. If anything else fails after the
// claim committed, ClaimFinishTx returns the claim of attempt 1 with no
// error and done=false: the engine then runs fn the usual way (FinishTx),
// as for any claim it holds.
func (l *Ledger) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(pgx.Tx) ([]byte, error)) (idemstore.Claim, bool, error) {
	key := req.Key
	if err := key.Validate(); err != nil {
		return idemstore.Claim{}, false, err
	}
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return idemstore.Claim{}, false, l.opErr("claim", key, err)
	}
	conn := c.Conn()
	tx, err := sendTxBatch(ctx, conn, l.freshTxBatch(req, cursor))
	if isMustFail(err, "claim") {
		// Nothing was committed: the key has a record, or the horizon
		// covers it. End the failed transaction and read the key as
		// Claim does first, in one round trip; then give the connection
		// back before going on on the pool, as Claim does.
		claim, settled, found, err := l.rollbackAndRead(ctx, conn, req)
		releaseIdle(ctx, conn, c.Release)
		switch {
		case err != nil || settled:
		case found:
			claim, err = l.claimRecorded(ctx, req)
		default: // gone again (pruned), or below the horizon
			claim, err = l.Claim(ctx, req)
		}
		return claim, false, err
	}
	defer releaseIdle(ctx, conn, c.Release)
	switch {
	case isMustFail(err, "fence"):
		// The claim committed, but its lease was gone before the fence
		// (a lease shorter than one round trip): the engine finds out
		// in FinishTx.
		return acquired1(key), false, nil
	case err != nil:
		// The engine claims the usual way next. (Had the fence's
		// statement failed for a reason of its own, the claim would be
		// committed, and found held by this process until its lease ends.)
		return idemstore.Claim{}, false, l.opErr("claim", key, err)
	}
	claim := acquired1(key)
	if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, key); err != nil {
		return claim, false, err
	}
	value, err := fn(tx)
	if err != nil {
		return claim, false, err // fn's error as is: the claim alone was committed
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, key); err != nil {
		return claim, false, err
	}
	if err := l.commitTx(ctx, conn, key, 1, value); err != nil {
		if idemstore.IsStop(err) {
			return claim, false, err
		}
		return claim, false, nil // the usual way from here: FinishTx
	}
	return claim, true, nil
}

// acquired1 is the claim of attempt 1 of key.
func acquired1(key idemstore.Key) idemstore.Claim {
	return idemstore.Claim{State: idemstore.ClaimAcquired, Attempt: 1, Record: idemstore.Record{Key: key}}
}

// freshTxBatch is the first round trip of ClaimFinishTx: the claim's
// transaction, then BEGIN and the fence of fn's. (pgx's Batch.BeginTx
// makes the batch's first BEGIN that of the pgx.Tx it returns; the
// transaction open at the batch's end is fn's.)
func (l *core) freshTxBatch(req idemstore.ClaimRequest, cursor bool) *pgx.Batch {
	lease := req.Lease
	if lease <= 0 {
		lease = idem.DefaultLease
	}
	key := req.Key
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	if req.Durable {
		b.Queue(lockSharedSQL, l.lockID("job", key.Job))
	} else {
		b.Queue(syncOffLockSharedSQL, l.lockID("job", key.Job))
	}
	b.Queue(l.q.insertNewMust, key.Job, key.Period, req.Owner, micros(lease), req.Fingerprint)
	// COMMIT AND CHAIN: the claim's commit, and fn's transaction begun in
	// the same statement (a SET LOCAL, such as synchronous_commit, does
	// not carry over: fn's commit is synchronous).
	b.Queue("commit and chain")
	l.queueFence(b, key, 1, cursor)
	return b
}

// sendTxBatch sends b, which begins a transaction (Batch.BeginTx), and
// returns the transaction open at its end, or the first error.
func sendTxBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) (pgx.Tx, error) {
	br := conn.SendBatch(ctx, b)
	var err error
	for range b.QueuedQueries {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	tx := br.Tx()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tx, err
}

// rollbackAndRead ends conn's failed transaction and reads req's key as
// Claim does first (fastClaim), in one simple-protocol message: a failed
// transaction refuses to prepare a statement, which a batch may need.
func (l *Ledger) rollbackAndRead(ctx context.Context, conn *pgx.Conn, req idemstore.ClaimRequest) (idemstore.Claim, bool, bool, error) {
	q := "ROLLBACK; " + strings.NewReplacer("$1", quoteLiteral(req.Key.Job), "$2", quoteLiteral(req.Key.Period)).Replace(l.q.statusHex)
	res, err := conn.PgConn().Exec(ctx, q).ReadAll()
	var (
		status, fp string
		value      []byte
	)
	switch {
	case err != nil:
	case len(res) != 2:
		err = fmt.Errorf("rollback and read: %d results, want 2", len(res))
	case len(res[1].Rows) == 0:
		err = sql.ErrNoRows
	default:
		row := res[1].Rows[0]
		status, fp = string(row[0]), string(row[1])
		if row[2] != nil {
			value, err = hex.DecodeString(string(row[2]))
		}
	}
	return l.fastAnswer(req, err, status, fp, value)
}

// ClaimCommittedFirst marks ClaimFinishTx as committing the claim in a
// transaction of its own, before fn's: see [idemstore.ClaimFirst].
func (l *Ledger) ClaimCommittedFirst() {}

// mustFail is the marker of a statement that failed on purpose because it
// matched no row (see mustOne).
const mustFail = "idem-pgledger: no row matched"

// mustOne wraps a statement (a data-modifying one, or a SELECT ... FOR
// UPDATE) with RETURNING 1 (SELECT 1) so that it fails, with mustFail and
// label in the error, unless it changed (locked) exactly one row.
// (An error is all that pgx lets through from a transaction's BeginQuery,
// and it aborts a transaction before its COMMIT.) The cast to integer of
// a text that is not a number is the failure: it is evaluated only in that
// branch, at run time, as the text depends on the count.
func mustOne(stmt, label string) string {
	if !strings.HasPrefix(stmt, "SELECT") {
		stmt += " RETURNING 1"
	}
	return `WITH m AS (` + stmt + `) SELECT CASE WHEN count(*) = 1 THEN 1 ELSE ('` +
		mustFail + ` (` + label + `): ' || count(*))::integer END FROM m`
}

// isMustFail reports whether err is the failure of a mustOne statement
// with label.
func isMustFail(err error, label string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22P02" && strings.Contains(pe.Message, mustFail+" ("+label+")")
}

// quoteLiteral quotes s as an SQL string literal, read the same whatever
// standard_conforming_strings says: an escape string (E'...') with its
// backslashes doubled when it has any, a plain one otherwise; quotes
// doubled. Keys hold no NUL (idemstore.Key.Validate), which no literal
// could carry.
func quoteLiteral(s string) string {
	q := strings.ReplaceAll(s, "'", "''")
	if strings.Contains(q, `\`) {
		return `E'` + strings.ReplaceAll(q, `\`, `\\`) + `'`
	}
	return `'` + q + `'`
}
