package idem_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// ledgerHarness opens a new SQLite ledger for the conformance kit.
var ledgerHarness = idemtest.Harness{
	Open: func(t *testing.T, clk idem.Clock) idem.Store {
		return openLedger(t, t.TempDir(), idem.WithClock(clk))
	},
	LeaseExpiry: true,
	Items:       true,
	Tx:          idemtest.SQLTx(),
}

// stateFileHarness opens a new state file for the conformance kit.
var stateFileHarness = idemtest.Harness{
	Open: func(t *testing.T, clk idem.Clock) idem.Store {
		s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"), idem.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
	Watermark: true,
}

func TestLedgerConformance(t *testing.T) { t.Parallel(); idemtest.TestStore(t, ledgerHarness) }

func TestStateFileConformance(t *testing.T) { t.Parallel(); idemtest.TestStore(t, stateFileHarness) }

// TestLedgerModel and TestStateFileModel compare the stores with the
// reference model of idemtest.TestModel after every operation of random
// sequences; a long run: IDEM_MODEL_OPS=100000 (and IDEM_MODEL_SEED to
// reproduce).
func TestLedgerModel(t *testing.T) {
	t.Parallel()
	idemtest.TestModel(t, ledgerHarness, modelOptions)
}

func TestStateFileModel(t *testing.T) {
	t.Parallel()
	idemtest.TestModel(t, stateFileHarness, modelOptions)
}

// modelOptions sizes the model tests: 2000 operations in sequences of 500
// (TestModel's default), or under the race detector, which makes them some
// eight times slower (SQLite is instrumented too), 500 in sequences of 250;
// scripts/test.sh runs them at full size in its pass without it.
var modelOptions = func() idemtest.ModelOptions {
	if raceEnabled {
		return idemtest.ModelOptions{Ops: 500, Len: 250, Parallel: true, Faults: true}
	}
	return idemtest.ModelOptions{Parallel: true, Faults: true}
}()

// TestLedgerOutboxConformance runs idemtest's outbox suite on the SQLite
// ledger.
func TestLedgerOutboxConformance(t *testing.T) {
	t.Parallel()
	idemtest.TestOutbox(t, idemtest.OutboxHarness[*sql.Tx]{Open: func(t *testing.T) idem.TxStore[*sql.Tx] { return openLedger(t, t.TempDir()) }})
}
