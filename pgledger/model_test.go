package pgledger_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestModel compares the ledger with the reference model of
// idemtest.TestModel after every operation of random sequences, RunTx and
// CatchUpTx included, with store faults on the ledger's real connections
// (modelFaults): the connection of a claim's, a done mark's or RunTx's
// commit's write terminated by the server (pg_terminate_backend), or the
// reply to it lost after the server applied it. The database's clock moves
// with the model's through Shift, as in TestConformance. A long run:
// IDEM_MODEL_OPS=100000 (and IDEM_MODEL_SEED to reproduce a failure).
func TestModel(t *testing.T) {
	t.Parallel()
	// The sequences run in parallel, each on a pool of its own: one pool's
	// few connections, shared, could all be held by sequences that each
	// wait for one more.
	h, struck := modelFaults(t)
	h.Tx = modelTx()
	idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true, Faults: true})
	if t.Failed() {
		return
	}
	if kills, lost, leftArmed := struck(); kills == 0 || lost == 0 {
		t.Errorf("the faults struck too rarely: %d connections terminated, %d replies lost", kills, lost)
	} else {
		t.Logf("faults: %d connections terminated by the server, %d replies lost after the server applied the write; %d connections armed to lose a reply that they never read during the operation", kills, lost, leftArmed)
	}
}

// modelTx runs the model's RunTx and CatchUpTx jobs with their business
// writes in the ledger's schema, table model_effects.
func modelTx() *idemtest.TxHarness {
	return modelTxFor[*pgledger.Ledger](func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	})
}
