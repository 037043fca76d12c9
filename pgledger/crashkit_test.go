package pgledger_test

import (
	"testing"

	"github.com/idemgo/idem/internal/crashcheck"
)

// TestCrashKit runs the README's "Testing your own job" on both ledgers,
// whose leases are on the server's clock (so no fake clock can expire
// them): on a pgx pool and on a *sql.DB of each driver; with the job's own
// lease of two hours and with WaitForTurn too; and checks that a job whose
// fn fails returns at once from Crash and Recover, one attempt per call
// (crashcheck.All).
func TestCrashKit(t *testing.T) {
	t.Parallel()
	t.Run("pool", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		crashcheck.All(t, func(t *testing.T) crashcheck.Store { return openLedger(t, pool) })
	})
	for _, driver := range sqlDrivers {
		t.Run("sql-"+driver, func(t *testing.T) {
			t.Parallel()
			db := openDB(t, driver)
			crashcheck.All(t, func(t *testing.T) crashcheck.Store { return openDBLedger(t, db) })
		})
	}
}
