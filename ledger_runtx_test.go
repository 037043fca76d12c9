package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemgo/idem"
)

// TestRunTxFreshKeyRecords: a new key's RunTx writes, in its one
// transaction, the record a claim and a done mark would have left: done,
// attempt 1, no lease, the owner, the value (RunTxValue); and when fn
// fails, fn's writes are gone and the key holds attempt 1's failure, so
// the next RunTx runs attempt 2.
func TestRunTxFreshKeyRecords(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE biz(k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ok := idem.Key{Job: "runtx", Period: "ok"}
	v, err := idem.RunTxValue(ctx, l, ok, func(ctx context.Context, tx *sql.Tx) (int, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO biz(k) VALUES('ok')`)
		return 42, err
	})
	if err != nil || v != 42 {
		t.Fatalf("RunTxValue = %v, %v", v, err)
	}
	rec := mustLookup(t, l, ok)
	if rec.Status != idem.StatusDone || rec.Attempt != 1 || !rec.LeaseUntil.IsZero() || rec.Owner == "" ||
		string(rec.Value) != "42" || rec.Failures != 0 || rec.LastError != "" {
		t.Fatalf("after a fresh RunTxValue: %+v", rec)
	}

	bad := idem.Key{Job: "runtx", Period: "bad"}
	err = l.RunTx(ctx, bad, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO biz(k) VALUES('bad')`); err != nil {
			return err
		}
		return errors.New("boom")
	}, idem.RetryWithin(0))
	if err == nil {
		t.Fatal("RunTx of a failing fn returned nil")
	}
	var n int
	if err := l.DB().QueryRowContext(ctx, `SELECT count(*) FROM biz WHERE k='bad'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("fn's write after its failure: %d rows, %v; want none", n, err)
	}
	rec = mustLookup(t, l, bad)
	if rec.Status != idem.StatusFailed || rec.Attempt != 1 || rec.Failures != 1 || rec.LastError != "boom" || rec.Value != nil {
		t.Fatalf("after a fresh RunTx whose fn failed: %+v; want attempt 1 failed once", rec)
	}
	// Failing once, retried in the call: attempt 1's claim was committed
	// with its failure, so the retry is attempt 2.
	again := idem.Key{Job: "runtx", Period: "again"}
	var attempts []int64
	err = l.RunTx(ctx, again, func(ctx context.Context, tx *sql.Tx) error {
		info, _ := idem.InfoFrom(ctx)
		attempts = append(attempts, info.Attempt)
		if len(attempts) == 1 {
			return errors.New("once")
		}
		return nil
	}, idem.WithBackoff(idem.Constant(0)))
	if err != nil || len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("RunTx failing once: %v, attempts %v; want nil after attempts 1 and 2", err, attempts)
	}
	if rec := mustLookup(t, l, again); rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Fatalf("after the retry: %+v", rec)
	}
}
