package mysqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// TestRunTxDuplicateReadsFirst: once a RunTx found its key recorded, the
// next RunTx reads the key first, without a lock: a duplicate trigger of a
// done key is answered at once, even while another transaction holds the
// key's row (a fresh RunTx's INSERT would wait for that row's lock to
// check the duplicate). A new key after it still runs in one transaction.
func TestRunTxDuplicateReadsFirst(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	l := openLedger(t, db)
	ctx := context.Background()
	noop := func(context.Context, *sql.Tx) error { return nil }
	k1, k2 := idem.Key{Job: "settle", Period: "2026-12-01"}, idem.Key{Job: "settle", Period: "2026-12-02"}
	for _, k := range []idem.Key{k1, k2, k1} { // the last one is a duplicate
		if err := l.RunTx(ctx, k, noop); err != nil {
			t.Fatalf("RunTx %s: %v", k, err)
		}
	}
	// Another transaction holds k2's row until the test ends.
	holder, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	var status string
	if err := holder.QueryRowContext(ctx, "SELECT status FROM "+l.Table("runs")+" WHERE job = ? AND period = ? FOR UPDATE", k2.Job, k2.Period).Scan(&status); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var res idem.Result
	ran := false
	err = l.RunTx(wctx, k2, func(context.Context, *sql.Tx) error { ran = true; return nil }, idem.ReportTo(&res))
	if err != nil || ran || res.Outcome != idem.AlreadyDone {
		t.Fatalf("a duplicate RunTx of %s while another transaction holds its row: outcome %v, fn ran %v, err %v; want AlreadyDone at once", k2, res.Outcome, ran, err)
	}
	if errors.Is(wctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the duplicate RunTx waited 10 s for the row's lock")
	}
	holder.Rollback()
	k3 := idem.Key{Job: "settle", Period: "2026-12-03"}
	if err := l.RunTx(ctx, k3, noop, idem.ReportTo(&res)); err != nil || res.Outcome != idem.Ran {
		t.Fatalf("RunTx of a new key after duplicates: outcome %v, err %v", res.Outcome, err)
	}
}
