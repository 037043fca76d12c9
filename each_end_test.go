package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
)

// recvIn waits for ch to close, in a goroutine other than the test's:
// false, with the test failed, after testwait's limit.
func recvIn(t *testing.T, ch <-chan struct{}, what string) bool {
	timer := time.NewTimer(testwait.Limit(t))
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		t.Errorf("gave up waiting for %s; goroutines:\n%s", what, testwait.Goroutines())
		return false
	}
}

// finishFailsOnce is an item store whose first FinishItems fails before
// it writes anything, and tells failed.
type finishFailsOnce struct {
	idemstore.ItemStore
	once   sync.Once
	failed chan struct{}
}

var errFinish = errors.New("finish failed: connection reset")

func (s *finishFailsOnce) FinishItems(ctx context.Context, key idem.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	fail := false
	s.once.Do(func() { fail = true })
	if fail {
		close(s.failed)
		return nil, errFinish
	}
	return s.ItemStore.FinishItems(ctx, key, step, ends)
}

// TestEachWorkerErrorStopsTheOthersCleanly: a store error in one worker
// ends the call; the other workers are not cancelled (fn's context never
// ends, a store call on its way is not abandoned) and start no item after
// it: what their chunks hold and did not start is handed back, claimable
// at once and not in doubt. Only the chunk whose done marks failed stays
// held, for its lease, as after a crash.
func TestEachWorkerErrorStopsTheOthersCleanly(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	failing := &finishFailsOnce{ItemStore: st.(idemstore.ItemStore), failed: make(chan struct{})}
	clk := idemtest.NewAutoClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	ran := map[string]int{}
	all3 := make(chan struct{}) // the three workers are in fn at once
	// A call that hangs fails.
	limit, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	res, err := idem.Each(limit, failing, points, accounts(60), func(ctx context.Context, item string) error {
		mu.Lock()
		ran[item]++
		n := len(ran)
		mu.Unlock()
		switch {
		case n == 3:
			close(all3)
		case n < 3:
			if !recvIn(t, all3, "the three workers in fn at once") {
				return errors.New("gave up")
			}
		default:
			if !recvIn(t, failing.failed, "the first done marks to fail") {
				return errors.New("gave up")
			}
		}
		if ctx.Err() != nil {
			t.Errorf("%s: fn's context ended (%v): a worker's error cancelled another's item", item, context.Cause(ctx))
		}
		return nil
	}, idem.AtMostOnce(), idem.WithClock(clk), idem.WithWorkers(3), idem.WithBatch(1))
	if !errors.Is(err, errFinish) || res.Outcome != idem.Failed {
		t.Fatalf("Each whose first done marks fail: %v, outcome %s; want the store's error, Failed", err, res.Outcome)
	}
	c, err := l.CountItems(context.Background(), points)
	if err != nil {
		t.Fatal(err)
	}
	rest := testledger.ClaimAll(t, failing.ItemStore, points, clk.Now())
	for _, it := range rest {
		if it.Doubt || ran[it.Item] > 0 {
			t.Fatalf("claimable after the call: %+v (fn called %d times); want only items that did not run, not in doubt", it, ran[it.Item])
		}
	}
	// Every item that ran is done but the one whose done mark failed;
	// every other is claimable at once but the rest of that one's chunk.
	if held := 60 - int(c.Done) - len(rest); c.Done < 2 || int(c.Done) != len(ran)-1 || held < 1 || c.Unknown != 0 {
		t.Fatalf("fn ran %d items; counts %+v, %d claimable, %d held; want all but one done, the others claimable but the failed chunk's, none unknown",
			len(ran), c, len(rest), held)
	}
	for it, n := range ran {
		if n != 1 {
			t.Fatalf("fn ran %s %d times", it, n)
		}
	}
}
