package pgledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAddItemsSameBatchAddsNothingWithoutWaiting: a batch that AddItems
// recorded before, given again as it was (another host generating the
// period's items in the same order), is known to add nothing without
// waiting for the period's row, which concurrent AddItems take in turns:
// here a transaction of the test holds that row, and the second AddItems
// of the same batch returns all the same, adding nothing. A batch that
// differs (the same items in another order) still takes its turn, and still
// adds nothing: the set holds each item once.
func TestAddItemsSameBatchAddsNothingWithoutWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app := uniqueName("idem_items_")
	cfg, err := pgxpool.ParseConfig(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := openLedger(t, pool)
	admin := newPool(t)
	key := idem.Key{Job: "fan", Period: "2026-10-27"}
	batch := make([]string, 500)
	for i := range batch {
		batch[i] = fmt.Sprintf("item-%04d", i)
	}
	if err := l.AddItems(ctx, key, batch); err != nil {
		t.Fatal(err)
	}
	total := func() int64 {
		t.Helper()
		c, err := l.CountItems(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return c.Total()
	}
	if n := total(); n != 500 {
		t.Fatalf("%d items after the first batch, want 500", n)
	}

	// Hold the period's row, as a concurrent AddItems does while it writes.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+table(l, "itemsets")+` WHERE job = $1 AND period = $2 FOR UPDATE`, key.Job, key.Period); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.AddItems(ctx, key, batch) }()
	var addErr error
	returned, blocked := false, false
	testwait.Until(t, func() bool {
		select {
		case addErr = <-done:
			returned = true
			return true
		default:
		}
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		blocked = n > 0
		return blocked
	}, "the second AddItems of the same batch to return, or to wait for the period's row")
	if blocked {
		tx.Rollback(ctx)
		testwait.Recv(t, done, "AddItems to return once the period's row is free")
		t.Fatal("AddItems of a batch recorded before waited for the period's row (and rewrote it item by item)")
	}
	if !returned || addErr != nil {
		t.Fatalf("second AddItems: returned %v, %v", returned, addErr)
	}
	tx.Rollback(ctx)

	// The same items in another order: recorded item by item, adding none.
	reversed := make([]string, len(batch))
	for i, it := range batch {
		reversed[len(batch)-1-i] = it
	}
	if err := l.AddItems(ctx, key, reversed); err != nil {
		t.Fatal(err)
	}
	if n := total(); n != 500 {
		t.Fatalf("%d items after the same batch twice and reversed once, want 500", n)
	}
}
