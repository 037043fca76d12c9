package idem_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestRerunDependentsKills is idemtest's kill kit of a re-run with its
// dependents (a RunTx settlement, a mail job with an outbox, a monthly
// report) on the SQLite ledger, its runners SIGKILLed at random moments.
func TestRerunDependentsKills(t *testing.T) {
	idemtest.TestRerunDependentsKills(t, idemtest.RerunKillHarness[*sql.Tx]{
		KillHarness: idemtest.KillHarness[*sql.Tx]{
			Open: func(t *testing.T) (idem.TxStore[*sql.Tx], string) {
				dir := t.TempDir()
				return openLedger(t, dir), dir
			},
			Reopen: func(_ context.Context, dir string) (idem.TxStore[*sql.Tx], func(), error) {
				l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
				if err != nil {
					return nil, nil, err
				}
				return l, func() { _ = l.Close() }, nil
			},
		},
		Table: func(_ idem.Store, name string) string { return name },
		Exec: func(ctx context.Context, tx *sql.Tx, query string, args ...any) error {
			_, err := tx.ExecContext(ctx, query, args...)
			return err
		},
		QueryRow: func(ctx context.Context, tx *sql.Tx, query string, args []any, dest ...any) error {
			return tx.QueryRowContext(ctx, query, args...).Scan(dest...)
		},
	})
}
