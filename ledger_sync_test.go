package idem_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
)

// TestLedgerDurableWritesSynced: an owned ledger's writes share one kept
// connection, switching PRAGMA synchronous per transaction: an
// AtLeastOnce claim commits at NORMAL (not synced, as documented), while
// an AtMostOnce claim, a done mark and a RunTx transaction commit at FULL
// (synced), whatever write came before them.
func TestLedgerDurableWritesSynced(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	level := func(what string, want int) {
		t.Helper()
		got, err := idem.LedgerKeptSynchronous(l)
		if err != nil || got != want {
			t.Fatalf("%s: synchronous %d (%v), want %d", what, got, err, want)
		}
	}
	const normal, full = 1, 2
	err := l.Run(ctx, idem.Key{Job: "sync", Period: "1"}, func(context.Context) error {
		level("in fn, after an AtLeastOnce claim", normal)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	level("after the done mark", full)
	err = l.Run(ctx, idem.Key{Job: "sync", Period: "2"}, func(context.Context) error {
		level("in fn, after an AtMostOnce claim", full)
		return nil
	}, idem.AtMostOnce())
	if err != nil {
		t.Fatal(err)
	}
	// An unsynced write last (a relay's claim), then a RunTx.
	if err := l.RunTx(ctx, idem.Key{Job: "sync", Period: "3"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if msgs, err := store(t, l).ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 1, Owner: "r", Now: time.Now(), Lease: time.Minute}); err != nil || len(msgs) != 1 {
		t.Fatalf("claim: %v, %v", msgs, err)
	}
	level("after a relay's claim", normal)
	if err := l.RunTx(ctx, idem.Key{Job: "sync", Period: "4"}, func(ctx context.Context, tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&v); err != nil {
			return err
		}
		if v != full {
			t.Errorf("RunTx's transaction at synchronous %d, want %d (FULL)", v, full)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
