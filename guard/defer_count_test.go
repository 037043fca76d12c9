package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem/guard"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestCountItemsAfterDeferral: after an Each or EachTx deferred by a guard
// (the windows running finish, the rest of their chunks is handed back) or
// by a breaker (the windows marked started are handed back unrun), nothing
// runs: CountItems counts no item running, and counts as failed only the
// items whose fn failed; the items handed back count as pending.
func TestCountItemsAfterDeferral(t *testing.T) {
	for _, by := range []string{"guard", "breaker"} {
		for _, tx := range []bool{false, true} {
			name := by + "/" + map[bool]string{false: "Each", true: "EachTx"}[tx]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				const n = 1000
				l := openLedger(t, t.TempDir())
				ctx := context.Background()
				clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
				cg := newFakeCgroup(t, 1000)
				cg.setUsed(500)
				var calls atomic.Int64
				item := func() error {
					k := calls.Add(1)
					switch {
					case by == "guard" && k == 150:
						cg.setUsed(900) // over the guard's limit from now on
					case by == "breaker" && k > 150:
						return errors.New("partner API: 503")
					}
					return nil
				}
				var opt idem.Option = idem.WithGuard(guard.MemoryGuard{Limit: 0.85, Cgroup: cg.dir})
				if by == "breaker" {
					opt = idem.WithBreaker(idem.NewBreaker(3, time.Hour))
				}
				var res idem.EachResult
				var err error
				if tx {
					res, err = idem.EachTx(ctx, l, points, accounts(n), func(context.Context, *sql.Tx, string) error { return item() },
						opt, idem.WithClock(clk), idem.WithBatch(20))
				} else {
					res, err = idem.Each(ctx, l, points, accounts(n), func(context.Context, string) error { return item() },
						opt, idem.WithClock(clk), idem.WithBatch(20))
				}
				if !errors.Is(err, idem.ErrDeferred) {
					t.Fatalf("%s: %v (%+v), want deferred", name, err, res.Counts)
				}
				counts, err := l.CountItems(ctx, points)
				if err != nil {
					t.Fatal(err)
				}
				failed, parked := itemRecords(t, l.DB(), points)
				t.Logf("after the deferral: %+v; %d items record a failure; fn called %d times", counts, failed, calls.Load())
				if counts.Running != 0 || res.Counts.Running != 0 {
					t.Errorf("%d items counted running (the call's result: %d) while nothing runs", counts.Running, res.Counts.Running)
				}
				if counts.Failed != int64(failed) || counts.Parked != int64(parked) {
					t.Errorf("counted %d failed and %d parked; %d items record a failure, %d parked", counts.Failed, counts.Parked, failed, parked)
				}
				if counts.Total() != n || counts.Pending != n-counts.Done-counts.Failed-counts.Parked || counts.Pending == 0 {
					t.Errorf("counts %+v: want %d items, those not done, failed or parked pending", counts, n)
				}
			})
		}
	}
}
