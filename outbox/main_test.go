package outbox_test

import (
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

// t0 is the fake clocks' start.
var t0 = testledger.T0

type collect = testledger.Collect
