package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// lostCommit is the ledger, except that its first one-transaction claim
// (RunTx of a key with no record) fails to commit after fn ran: the
// context of its transaction ends between fn and the commit, so SQLite
// rolls back fn's writes and the done mark, as after a failed COMMIT. With
// claimFirst, the claim commits first, in a transaction of its own, and
// ClaimFinishTx answers with that claim and no error (idemstore.ClaimFirst:
// pgledger's shape); without, the claim is rolled back too and the answer
// is the error (the SQLite ledger's).
type lostCommit struct {
	idemstore.Store
	l          idemstore.FreshTxStore[*sql.Tx]
	claimFirst bool
	left       atomic.Int32 // commits still to lose
}

func (s *lostCommit) FinishTx(ctx context.Context, key idem.Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) ([]byte, error)) error {
	return s.l.FinishTx(ctx, key, attempt, now, cursor, fn)
}

// cancelAfter is fn, whose transaction's context cancel ends once fn ran.
func cancelAfter(cancel func(), fn func(*sql.Tx) ([]byte, error)) func(*sql.Tx) ([]byte, error) {
	return func(tx *sql.Tx) ([]byte, error) {
		v, err := fn(tx)
		cancel() // the commit fails
		return v, err
	}
}

func (s *lostCommit) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(*sql.Tx) ([]byte, error)) (idemstore.Claim, bool, error) {
	if s.left.Add(-1) < 0 {
		return s.l.ClaimFinishTx(ctx, req, cursor, fn)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !s.claimFirst {
		return s.l.ClaimFinishTx(cctx, req, cursor, cancelAfter(cancel, fn))
	}
	c, err := s.l.Claim(ctx, req)
	if err != nil || c.State != idemstore.ClaimAcquired {
		return c, false, err
	}
	if err := s.l.FinishTx(cctx, req.Key, c.Attempt, req.Now, cursor, cancelAfter(cancel, fn)); err == nil {
		return c, false, fmt.Errorf("lostCommit: the transaction committed")
	}
	return c, false, nil
}

func (s *lostCommit) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, s, key, fn, opts...)
}

// TestRunTxAttemptAfterLostCommit: a RunTx of a key with no record whose
// transaction did not commit after fn ran (the one-transaction claim, in
// both its shapes) counts that run as a failed attempt 1: fn runs again as
// attempt 2 (it ran again as attempt 1), and the key is done once, by the
// second run, whose writes alone are kept.
func TestRunTxAttemptAfterLostCommit(t *testing.T) {
	for _, claimFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("claimFirst=%v", claimFirst), func(t *testing.T) {
			l := openLedger(t, t.TempDir())
			ctx := context.Background()
			if _, err := l.DB().ExecContext(ctx, `CREATE TABLE runs (attempt INTEGER)`); err != nil {
				t.Fatal(err)
			}
			st := &lostCommit{Store: store(t, l), l: store(t, l), claimFirst: claimFirst}
			st.left.Store(1)
			var attempts []int64
			var r idem.Result
			err := idem.RunTx(ctx, st, key, func(ctx context.Context, tx *sql.Tx) error {
				info, _ := idem.InfoFrom(ctx)
				attempts = append(attempts, info.Attempt)
				_, err := tx.ExecContext(ctx, `INSERT INTO runs VALUES (?)`, info.Attempt)
				return err
			}, idem.WithBackoff(idem.Constant(time.Millisecond)), idem.ReportTo(&r))
			if err != nil {
				t.Fatalf("RunTx: %v", err)
			}
			if fmt.Sprint(attempts) != "[1 2]" || r.Attempt != 2 || r.Attempts != 2 {
				t.Fatalf("fn ran as attempts %v, result attempt %d of %d; want 1 then 2", attempts, r.Attempt, r.Attempts)
			}
			var got []int64
			rows, err := l.DB().QueryContext(ctx, `SELECT attempt FROM runs`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var a int64
				if err := rows.Scan(&a); err != nil {
					t.Fatal(err)
				}
				got = append(got, a)
			}
			rows.Close()
			if fmt.Sprint(got) != "[2]" {
				t.Fatalf("rows %v; want the second run's alone", got)
			}
			if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 2 {
				t.Fatalf("record %+v, want done by attempt 2", rec)
			}
		})
	}
}
