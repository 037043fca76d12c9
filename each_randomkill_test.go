//go:build !race

package idem_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestEachRandomKills is idemtest's random-kill kit on the SQLite ledger:
// Each and EachTx SIGKILLed while generating the item set, then at random
// moments, in every mode.
func TestEachRandomKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("3000 items, 13 kills per mode")
	}
	idemtest.TestEachRandomKills(t, sqliteKillHarness())
}

// sqliteKillHarness is the kill kits' harness of the SQLite ledger: a
// ledger in a directory of its own (Reopen's argument), with the table
// granted for EachTx's business writes.
func sqliteKillHarness() idemtest.KillHarness[*sql.Tx] {
	db := func(s idem.TxStore[*sql.Tx]) *sql.DB { return s.(*idem.Ledger).DB() }
	return idemtest.KillHarness[*sql.Tx]{
		Open: func(t *testing.T) (idem.TxStore[*sql.Tx], string) {
			dir := t.TempDir()
			prepareGranted(t, dir)
			return openLedger(t, dir), dir
		},
		Reopen: func(_ context.Context, dir string) (idem.TxStore[*sql.Tx], func(), error) {
			l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
			if err != nil {
				return nil, nil, err
			}
			return l, func() { _ = l.Close() }, nil
		},
		Apply: func(ctx context.Context, _ idem.TxStore[*sql.Tx], tx *sql.Tx, item string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO granted VALUES(?, 1) ON CONFLICT DO UPDATE SET n = n + 1`, item)
			return err
		},
		Applied: func(t *testing.T, s idem.TxStore[*sql.Tx]) map[string]int {
			return grantedCounts(t, db(s))
		},
		ItemStatus: func(ctx context.Context, s idem.TxStore[*sql.Tx], key idem.Key, item string) (string, error) {
			var status string
			err := db(s).QueryRowContext(ctx, `SELECT status FROM idem_item_state WHERE job = ? AND period = ? AND item = ?`, key.Job, key.Period, item).Scan(&status)
			return status, err
		},
		Parallel: true,
	}
}
