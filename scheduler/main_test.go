package scheduler_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/scheduler"
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

func startScheduler(t *testing.T, s *scheduler.Scheduler) {
	t.Helper()
	schedtest.Start(t, s)
}
