package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// opaqueTx is a TxStore whose FinishTx reports every error as a text of
// its own, keeping nothing of the error it got (no %w): the engine cannot
// find fn's error in it.
type opaqueTx struct {
	idemstore.Store
	l idemstore.TxStore[*sql.Tx]
}

func (s opaqueTx) FinishTx(ctx context.Context, key idem.Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) ([]byte, error)) error {
	if err := s.l.FinishTx(ctx, key, attempt, now, cursor, fn); err != nil {
		return fmt.Errorf("opaque store: %v", err)
	}
	return nil
}

// RunTx makes it an idem.TxStore, as a store of one's own does.
func (s opaqueTx) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, s, key, fn, opts...)
}

// TestRunTxFnFailureKnownToEngine: RunTx knows that fn failed (here
// with a Permanent error) whatever the store makes of fn's error, as
// idemstore.TxStore.FinishTx allows: the key is parked at once with fn's
// own error, which Run's error wraps.
func TestRunTxFnFailureKnownToEngine(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	bad := errors.New("bad input")
	calls := 0
	err := idem.RunTx(ctx, opaqueTx{store(t, l), store(t, l)}, key, func(context.Context, *sql.Tx) error {
		calls++
		return idem.Permanent(bad)
	})
	if !errors.Is(err, idem.ErrParked) || !errors.Is(err, bad) || calls != 1 {
		t.Fatalf("RunTx: %v after %d calls; want ErrParked wrapping fn's error after 1 call", err, calls)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusParked || rec.LastError != bad.Error() {
		t.Fatalf("record %+v, want parked with fn's error", rec)
	}
}

// lostAnswerTx is a TxStore whose FinishTx commits and then reports an
// error, as when the connection breaks after the database applied the
// commit and before its answer arrived.
type lostAnswerTx struct {
	idemstore.Store
	l idemstore.TxStore[*sql.Tx]
}

func (s lostAnswerTx) FinishTx(ctx context.Context, key idem.Key, attempt int64, now time.Time, cursor bool, fn func(*sql.Tx) ([]byte, error)) error {
	if err := s.l.FinishTx(ctx, key, attempt, now, cursor, fn); err != nil {
		return err
	}
	return errors.New("lost answer store: the connection broke after the commit")
}

// RunTx makes it an idem.TxStore, as a store of one's own does.
func (s lostAnswerTx) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, s, key, fn, opts...)
}

// TestRunTxCommitAnswerLost: a RunTx whose transaction committed but whose
// commit's answer was lost reads the key's record, finds it done by its
// attempt, and returns nil (outcome Ran, the value stored): fn ran once.
func TestRunTxCommitAnswerLost(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	calls := 0
	var res idem.Result
	v, err := idem.RunTxValue[int, *sql.Tx](ctx, lostAnswerTx{store(t, l), store(t, l)}, key, func(context.Context, *sql.Tx) (int, error) {
		calls++
		return 42, nil
	}, idem.ReportTo(&res))
	if err != nil || res.Outcome != idem.Ran || v != 42 || calls != 1 {
		t.Fatalf("RunTxValue: %d, %v (%s) after %d calls; want 42, nil (ran) after 1 call", v, err, res.Outcome, calls)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v, want done by attempt 1", rec)
	}
}
