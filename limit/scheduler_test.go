package limit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/limit"
)

// Two jobs of a Scheduler that share an AtOnce limit of one catch up on
// their periods one at a time, every period done once: a period waiting
// for the place is neither failed nor skipped.
func TestSchedulerJobsShareAPlace(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	a, err := limit.NewAtOnce(l, "db", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	clk := idemtest.NewClock(time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var mu sync.Mutex
	now, most := 0, 0
	runs := map[idem.Key]int{}
	for _, job := range []string{"settle_eu", "settle_us"} {
		err := s.Add(job, idem.Daily(time.UTC), func(ctx context.Context, p idem.Period) error {
			mu.Lock()
			now++
			most = max(most, now)
			runs[idem.Key{Job: job, Period: p.Name}]++
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // the work: the other job may come meanwhile
			mu.Lock()
			now--
			mu.Unlock()
			return nil
		}, idem.Since(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), idem.WithLimits(a))
		if err != nil {
			t.Fatal(err)
		}
	}
	go s.Run(context.Background())
	defer s.Shutdown(context.Background())
	want := []idem.Key{}
	for _, job := range []string{"settle_eu", "settle_us"} {
		for _, p := range []string{"2026-12-01", "2026-12-02", "2026-12-03"} {
			want = append(want, idem.Key{Job: job, Period: p})
		}
	}
	testwait.Until(t, func() bool {
		for _, k := range want {
			if rec, ok, err := l.Lookup(context.Background(), k); err != nil || !ok || rec.Status != idem.StatusDone {
				return false
			}
		}
		return true
	}, "both jobs' three periods done")
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("%d periods ran at once; the limit lets 1", most)
	}
	for _, k := range want {
		if runs[k] != 1 {
			t.Errorf("%s ran %d times", k, runs[k])
		}
	}
}
