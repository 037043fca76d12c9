package mysqlledger_test

import (
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/mysqlledger"
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
// CatchUpTx included, with store faults on the ledger's real connections
// (modelFaults): the connection of a claim's, a done mark's or RunTx's
// commit's write killed by the server (KILL CONNECTION), or the reply to
// its commit lost after the server applied it. A long run:
// IDEM_MODEL_OPS=100000.
func TestModel(t *testing.T) {
	t.Parallel()
	testDSN(t)
	h, struck := modelFaults()
	h.Tx = modelTx()
	idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true, Faults: true})
	if t.Failed() {
		return
	}
	if kills, lost := struck(); kills == 0 || lost == 0 {
		t.Errorf("the faults struck too rarely: %d connections killed, %d replies lost", kills, lost)
	} else {
		t.Logf("faults: %d connections killed by the server, %d replies lost after the server applied the write", kills, lost)
	}
}

// modelFaults is harness() with each ledger on a database/sql pool of its
// own whose connections the model breaks (faults_test.go): Arm kills the
// connection of the next write (KILL CONNECTION from another connection,
// the id from CONNECTION_ID()) or loses the reply to it. struck counts
// what struck, over every ledger.
func modelFaults() (h idemtest.Harness, struck func() (kills, lost int64)) {
	var mu sync.Mutex
	of := map[*mysqlledger.Ledger]*faults{}
	var all []*faults
	h = harness()
	h.Open = func(t *testing.T, clk idem.Clock) idem.Store {
		f := newFaults(t, 0)
		l := openLedger(t, openFaultyDB(t, f), mysqlledger.WithRunOptions(idem.WithClock(clk)))
		mu.Lock()
		defer mu.Unlock()
		of[l], all = f, append(all, f)
		return l
	}
	h.Faults = &idemtest.FaultHarness{Arm: func(t *testing.T, s idem.Store, kind idemtest.Fault) func() bool {
		mu.Lock()
		f := of[s.(*mysqlledger.Ledger)]
		mu.Unlock()
		f.struck.Store(false)
		arm := &f.armKill
		if kind == idemtest.FaultLoseReply {
			arm = &f.armLose
		}
		arm.Store(true)
		return func() bool {
			arm.Store(false)
			return f.struck.Swap(false)
		}
	}}
	return h, func() (kills, lost int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range all {
			kills += f.kills.Load()
			lost += f.lost.Load()
		}
		return kills, lost
	}
}
