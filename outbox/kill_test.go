package outbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestOutboxRelayKilledMidDelivery is idemtest's kit of that name on the
// SQLite ledger: a relay process SIGKILLed while the receiver holds one of
// its webhook requests; after a restart every message arrives, the
// interrupted one again with the same Idempotency-Key, each topic in order.
func TestOutboxRelayKilledMidDelivery(t *testing.T) {
	t.Parallel()
	idemtest.TestRelayKilledMidDelivery(t, idemtest.KillHarness[*sql.Tx]{
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
		Parallel: true,
	})
}
