package mysqlledger_test

import (
	"testing"

	"github.com/idemgo/idem/idemtest"
)

// TestConformance runs idem's conformance suite on the ledger, items
// included, against the real server.
func TestConformance(t *testing.T) {
	t.Parallel()
	testDSN(t)
	idemtest.TestStore(t, harness())
}

// TestModel compares the ledger with the reference model of
// idemtest.TestModel after every operation of random sequences, RunTx and
// CatchUpTx included. A long run: IDEM_MODEL_OPS=100000.
func TestModel(t *testing.T) {
	t.Parallel()
	testDSN(t)
	h := harness()
	h.Tx = modelTx()
	idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true})
}
