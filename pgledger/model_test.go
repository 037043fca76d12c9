package pgledger_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestModel compares the ledger with the reference model of
// idemtest.TestModel after every operation of random sequences, RunTx and
// CatchUpTx included, with store faults (a claim or a done mark that fails
// before the ledger or after it applied the write, failed in Go). The
// database's clock moves with the model's through Shift, as in
// TestConformance. A long run: IDEM_MODEL_OPS=100000 (and
// IDEM_MODEL_SEED to reproduce a failure).
func TestModel(t *testing.T) {
	t.Parallel()
	h := harness(newPool(t))
	// The sequences run in parallel, each on a pool of its own: one pool's
	// few connections, shared, could all be held by sequences that each
	// wait for one more.
	h.Open = func(t *testing.T, clk idem.Clock) idem.Store {
		return openLedger(t, newPool(t), pgledger.WithRunOptions(idem.WithClock(clk)))
	}
	h.Tx = modelTx()
	idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true, Faults: true})
}

// modelTx runs the model's RunTx and CatchUpTx jobs with their business
// writes in the ledger's schema, table model_effects.
func modelTx() *idemtest.TxHarness {
	return modelTxFor[*pgledger.Ledger](func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	})
}
