package idem_test

import (
	"iter"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testledger"
)

// The helpers the tests of this package share with the subsystems' (see
// package testledger).

// t0 is the fake clocks' start.
var t0 = testledger.T0

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = testledger.Race

// openLedger opens the ledger dir/ledger.db, creating it if need be, and
// closes it when t ends.
func openLedger(t testing.TB, dir string, opts ...idem.Option) *idem.Ledger {
	t.Helper()
	return testledger.Open(t, dir, opts...)
}

// effects is an append-only, fsynced log of fn's effects: the "downstream".
type effects = testledger.Effects

func newEffects(dir string) *effects { return testledger.NewEffects(dir) }

func mustLookup(t testing.TB, s idem.Store, key idem.Key) idem.Record {
	t.Helper()
	return testledger.MustLookup(t, s, key)
}

// The fixtures of the fan-out and catch-up tests.
var (
	points = testledger.Points
	daily  = testledger.Daily
)

func accounts(n int) iter.Seq2[string, error] { return testledger.Accounts(n) }

func newTally() *testledger.Tally { return testledger.NewTally() }

func day(n int) time.Time { return testledger.Day(n) }

func openState(t testing.TB, dir string, opts ...idem.Option) *idem.StateFile {
	t.Helper()
	return testledger.OpenState(t, dir, opts...)
}

// store is the store behind the ledger l, whose methods drive the
// protocol by hand.
func store(t testing.TB, l *idem.Ledger) testledger.Store {
	t.Helper()
	return testledger.SPI(t, l)
}

// stateStore is the store behind the state file s.
func stateStore(t testing.TB, s *idem.StateFile) testledger.StateStore {
	t.Helper()
	return testledger.StateSPI(t, s)
}

func startScheduler(t *testing.T, s *idem.Scheduler) {
	t.Helper()
	schedtest.Start(t, s)
}
