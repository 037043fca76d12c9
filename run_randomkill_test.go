//go:build !race

package idem_test

import (
	"testing"

	"github.com/idemgo/idem/idemtest"
)

// TestConcurrentRunKills is idemtest's kill kit for concurrent Runs and
// RunTx calls on the SQLite ledger, whose claims and done marks commit in
// groups.
func TestConcurrentRunKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("6 kills of 16 goroutines per mode")
	}
	idemtest.TestConcurrentRunKills(t, sqliteKillHarness())
}
