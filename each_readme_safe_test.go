package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/guard"
)

// The code of docs/fanout.md's "Running big fan-outs safely".

// pointsBreaker is the breaker of the daily_points job: one per process,
// shared by every trigger, so that a trigger during an outage finds it open.
var pointsBreaker = idem.NewBreaker(20, 30*time.Second)

// grantPointsSafely is grantPoints sized for a database with 100
// connections, paced, and stopping by itself when the host or the partner
// cannot take more.
func grantPointsSafely(ctx context.Context, ledger *idem.Ledger, day string) error {
	res, err := idem.EachTx(ctx, ledger, idem.Key{Job: "daily_points", Period: day}, eligibleAccounts(ctx, ledger.DB(), day),
		func(ctx context.Context, tx *sql.Tx, account string) error {
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET points = points + 10 WHERE id = ?`, account)
			return err
		},
		idem.WithWorkers(25),                               // 20-30 of the database's 100 connections for this job
		idem.WithBatch(500),                                // 500 items a transaction
		idem.WithPause(time.Second),                        // 0.5-1 s between a worker's batches
		idem.WithRate(2000, 500),                           // never more than 2000 items a second
		idem.WithGuard(guard.MemoryGuard{Limit: 0.85}),     // memory above 85 %: stop claiming
		idem.WithGuard(guard.DiskGuard{MinFree: 64 << 20}), // under 64 MiB free by the ledger: stop claiming
		idem.WithBreaker(pointsBreaker))                    // 20 failures in a row: stop for 30 s, then probe
	var d *idem.Deferral
	if errors.As(err, &d) {
		// Nothing failed and nothing is lost: the next trigger goes on.
		log.Printf("daily_points %s deferred (%s): %d of %d done", day, d.Reason, res.Counts.Done, res.Counts.Total())
	}
	return err
}

// TestReadmeSafeFanOut runs docs/fanout.md's grantPointsSafely: it ends done, or
// deferred by the memory guard on a host whose memory is above 85 % in use
// (the guards are real here; guard/guard_test.go fakes them).
func TestReadmeSafeFanOut(t *testing.T) {
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().Exec(`CREATE TABLE accounts(id TEXT PRIMARY KEY, points INTEGER NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		if _, err := l.DB().Exec(`INSERT INTO accounts(id) VALUES(?)`, fmt.Sprintf("a%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	err := grantPointsSafely(context.Background(), l, "2026-10-27")
	var d *idem.Deferral
	if errors.As(err, &d) && d.Reason == "memory" {
		t.Skipf("this host's memory is above 85 %% in use: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var total int
	if err := l.DB().QueryRow(`SELECT sum(points) FROM accounts`).Scan(&total); err != nil || total != 4000 {
		t.Fatalf("points granted: %d, %v; want 4000", total, err)
	}
}
