package idemtest_test

import (
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/crashcheck"
)

// TestCrashKitOnEveryStore runs the README's "Testing your own job" on the
// root module's stores, the SQLite ledger and the state file (pgledger and
// redisstore run it in their modules), with the job's own lease of two
// hours and with WaitForTurn; and checks that a job whose fn fails returns
// at once from Crash and Recover, one attempt per call (crashcheck.All).
func TestCrashKitOnEveryStore(t *testing.T) {
	t.Parallel()
	stores := map[string]crashcheck.Open{
		"sqlite": func(t *testing.T) crashcheck.Store {
			l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		"statefile": func(t *testing.T) crashcheck.Store {
			s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			crashcheck.All(t, open)
		})
	}
}
