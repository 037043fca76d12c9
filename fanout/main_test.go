package fanout_test

import (
	"iter"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testledger"
)

// TestMain runs up to four parallel tests per CPU unless -parallel is given
// (see testledger.Main).
func TestMain(m *testing.M) { testledger.Main(m) }

// The helpers these tests share with the root package's (see package
// testledger).

func openLedger(t testing.TB, dir string, opts ...idem.Option) *idem.Ledger {
	t.Helper()
	return testledger.Open(t, dir, opts...)
}

func mustLookup(t testing.TB, s idem.Store, key idem.Key) idem.Record {
	t.Helper()
	return testledger.MustLookup(t, s, key)
}

// effects is an append-only, fsynced log of fn's effects: the "downstream".
type effects = testledger.Effects

func newEffects(dir string) *effects { return testledger.NewEffects(dir) }

// t0 is the fake clocks' start.
var t0 = testledger.T0

var points = testledger.Points

func accounts(n int) iter.Seq2[string, error] { return testledger.Accounts(n) }

func newTally() *testledger.Tally { return testledger.NewTally() }
