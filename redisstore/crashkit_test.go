package redisstore_test

import (
	"testing"

	"github.com/idemgo/idem/internal/crashcheck"
)

// TestCrashKit runs the README's "Testing your own job" on Redis, whose
// leases are on the server's clock (so no fake clock can expire them);
// with the job's own lease of two hours and with WaitForTurn too; and
// checks that a job whose fn fails returns at once from Crash and Recover,
// one attempt per call (crashcheck.All).
func TestCrashKit(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	crashcheck.All(t, func(t *testing.T) crashcheck.Store { return openStore(t, c) })
}
