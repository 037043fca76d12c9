package mysqlledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// TestTakeRateOneStatement: a rate limit's take is one autocommitted
// UPDATE once the limit's row exists (its first take also creates it:
// the UPDATE that finds no row, an INSERT, the UPDATE again), with no
// transaction around it: the limit's row is locked only while the server
// runs the statement, never across a round trip to the process. Counted
// by the server on the one connection the ledger's pool has, for a take
// reserved at once, one reserved with a wait, and one refused; the
// answers are idemstore.TakeRate's.
func TestTakeRateOneStatement(t *testing.T) {
	t.Parallel()
	l, counted := openCountedLedger(t)
	ctx := context.Background()
	r := idemstore.Rate{PerSecond: 1.0 / 3600, Burst: 1} // one an hour
	take := func(maxWait time.Duration) (wait time.Duration, reserved bool, statements map[string]int) {
		t.Helper()
		statements = counted(func() {
			var err error
			if wait, reserved, err = l.TakeRate(ctx, "mail", r, 1, maxWait); err != nil {
				t.Fatalf("TakeRate: %v", err)
			}
		})
		return wait, reserved, statements
	}
	if wait, ok, d := take(time.Minute); !ok || wait != 0 || len(d) != 2 || d["Com_update"] != 2 || d["Com_insert"] != 1 {
		t.Errorf("the first take: wait %v, reserved %v, statements %v; want at once, the UPDATE, the INSERT of the row, the UPDATE", wait, ok, d)
	}
	if wait, ok, d := take(2 * time.Hour); !ok || wait < 59*time.Minute || wait > time.Hour || len(d) != 1 || d["Com_update"] != 1 {
		t.Errorf("the second take, maxWait 2h: wait %v, reserved %v, statements %v; want reserved in about an hour, one UPDATE", wait, ok, d)
	}
	if wait, ok, d := take(time.Minute); ok || wait < 118*time.Minute || wait > 2*time.Hour || len(d) != 1 || d["Com_update"] != 1 {
		t.Errorf("the third take, maxWait 1m: wait %v, reserved %v, statements %v; want refused, ask again in about 1h59m, one UPDATE", wait, ok, d)
	}
}
