package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestEachRandomKills is idemtest's random-kill kit on Postgres, the root
// package's twin: Each and EachTx SIGKILLed while generating the item set,
// then at random moments, in every mode.
func TestEachRandomKills(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("3000 items, 13 kills per mode")
	}
	idemtest.TestEachRandomKills(t, pgKillHarness())
}

// pgKillHarness is the kill kits' harness of the Postgres ledger: a ledger
// in a fresh schema (Reopen's argument, in the database named by
// IDEM_TEST_PG_DSN, which a child inherits) with the table granted for
// EachTx's business writes; a child reaches it through a pool of its own.
func pgKillHarness() idemtest.KillHarness[pgx.Tx] {
	ledger := func(s idem.TxStore[pgx.Tx]) *pgledger.Ledger { return s.(*pgledger.Ledger) }
	return idemtest.KillHarness[pgx.Tx]{
		Open: func(t *testing.T) (idem.TxStore[pgx.Tx], string) {
			env, l := newEachEnv(t)
			return l, env.schema
		},
		Reopen: func(ctx context.Context, schema string) (idem.TxStore[pgx.Tx], func(), error) {
			l, err := openChildLedger(ctx, eachEnv{schema: schema})
			if err != nil {
				return nil, nil, err
			}
			return l, l.Pool().Close, nil
		},
		Apply: func(ctx context.Context, s idem.TxStore[pgx.Tx], tx pgx.Tx, item string) error {
			return grant(ctx, tx, table(ledger(s), "granted"), item)
		},
		Applied: func(t *testing.T, s idem.TxStore[pgx.Tx]) map[string]int {
			return grantedCounts(t, ledger(s), table(ledger(s), "granted"))
		},
		ItemStatus: func(ctx context.Context, s idem.TxStore[pgx.Tx], key idem.Key, item string) (string, error) {
			var status string
			err := ledger(s).Pool().QueryRow(ctx, `SELECT status FROM `+table(ledger(s), "item_state")+` WHERE job = $1 AND period = $2 AND item = $3`,
				key.Job, key.Period, item).Scan(&status)
			return status, err
		},
		NotDone: func(t *testing.T, s idem.TxStore[pgx.Tx], _ idem.Key) string { return notDone(t, ledger(s)) },
		Shift:   func(t *testing.T, s idem.Store, d time.Duration) { shift(t, s.(*pgledger.Ledger), d) },
	}
}

// TestConcurrentRunKills is idemtest's kill kit for concurrent Runs and
// RunTx calls on the Postgres ledger.
func TestConcurrentRunKills(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("6 kills of 16 goroutines per mode")
	}
	idemtest.TestConcurrentRunKills(t, pgKillHarness())
}
