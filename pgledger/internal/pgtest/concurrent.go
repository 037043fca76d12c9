package pgtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// RunTxConcurrently runs key's RunTx 16 times at once, through the ledgers
// in turn, with fn as the attempt, and returns the callers' outcomes; only
// nil or ErrInProgress may reach a caller.
func RunTxConcurrently[L TxLedger[T], T any](t *testing.T, ls []L, key idem.Key, fn func(ctx context.Context, l L, tx T) error) map[idem.Outcome]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	for i := range 16 {
		l := ls[i%len(ls)]
		wg.Go(func() {
			var res idem.Result
			err := l.RunTx(context.Background(), key, func(ctx context.Context, tx T) error {
				return fn(ctx, l, tx)
			}, idem.ReportTo(&res))
			if err != nil && !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("RunTx: %v (only nil or ErrInProgress may reach a caller)", err)
			}
			mu.Lock()
			outcomes[res.Outcome]++
			mu.Unlock()
		})
	}
	testwait.Group(t, &wg, "16 concurrent RunTx of %s", key)
	return outcomes
}

// EachDriver runs test as a parallel subtest for each database/sql driver
// of drivers.
func EachDriver(t *testing.T, drivers []string, test func(t *testing.T, driver string)) {
	DSN(t)
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, driver)
		})
	}
}
