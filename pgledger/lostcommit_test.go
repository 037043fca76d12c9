package pgledger_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/jackc/pgx/v5"
)

// lostCommit is the Postgres ledger, except that its first one-transaction
// claim fails to commit after fn ran: the context of fn's transaction ends
// between fn and the commit. The claim of attempt 1 has committed in a
// transaction of its own (idemstore.ClaimFirst).
type lostCommit struct {
	idemstore.FreshTxStore[pgx.Tx]
	left atomic.Int32 // commits still to lose
}

func (s *lostCommit) ClaimFinishTx(ctx context.Context, req idemstore.ClaimRequest, cursor bool, fn func(pgx.Tx) ([]byte, error)) (idemstore.Claim, bool, error) {
	if s.left.Add(-1) < 0 {
		return s.FreshTxStore.ClaimFinishTx(ctx, req, cursor, fn)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return s.FreshTxStore.ClaimFinishTx(cctx, req, cursor, func(tx pgx.Tx) ([]byte, error) {
		v, err := fn(tx)
		cancel() // the commit fails
		return v, err
	})
}

// RunTx makes it an idem.TxStore.
func (s *lostCommit) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, pgx.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, s, key, fn, opts...)
}

// TestRunTxAttemptAfterLostCommit: a RunTx of a key with no record whose
// transaction did not commit after fn ran counts that run as a failed
// attempt 1 (its claim committed): fn runs again as attempt 2, not as
// attempt 1 again, and the key is done by attempt 2.
func TestRunTxAttemptAfterLostCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	fs, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	st := &lostCommit{FreshTxStore: fs.(idemstore.FreshTxStore[pgx.Tx])}
	st.left.Store(1)
	key := idem.Key{Job: "lost", Period: "2026-10-27"}
	var attempts []int64
	err = idem.RunTx(ctx, st, key, func(ctx context.Context, tx pgx.Tx) error {
		info, _ := idem.InfoFrom(ctx)
		attempts = append(attempts, info.Attempt)
		return nil
	}, idem.WithBackoff(idem.Constant(time.Millisecond)))
	if err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("fn ran as attempts %v; want 1 then 2", attempts)
	}
	if rec, ok, err := l.Lookup(ctx, key); err != nil || !ok || rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Fatalf("record %+v (%v, %v); want done by attempt 2", rec, ok, err)
	}
}
