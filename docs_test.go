package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// stalledClock is the clock of a process that has stalled: its timers never
// fire (the heartbeat never runs), while the test moves Now forward.
type stalledClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stalledClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stalledClock) After(time.Duration) <-chan time.Time { return nil }

func (c *stalledClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestStateFileLease proves what StateFile's doc says of the lease: the
// lock never expires while its holder lives (another Run finds the job in
// progress however late it comes), but WithLease is how long a stall may
// last before CheckLease refuses; and the stalled attempt's done mark is
// still written when fn returns nil.
func TestStateFileLease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openState(t, dir)
	k := idem.Key{Job: "report", Period: "2026-10-27"}
	clk := &stalledClock{now: t0}
	const lease = time.Minute
	var before, after, othersErr error
	var res idem.Result
	err := s.Run(ctx, k, func(ctx context.Context) error {
		before = idem.CheckLease(ctx)
		clk.advance(lease + time.Second) // stalled past the lease: no renewal ran
		after = idem.CheckLease(ctx)
		// Another process (another store on the file), a day later by its clock.
		othersErr = openState(t, dir).Run(ctx, k, func(context.Context) error {
			t.Error("another store took the stalled holder's job over")
			return nil
		}, idem.WithClock(idemtest.NewClock(t0.Add(24*time.Hour))), idem.WithLease(lease))
		return nil
	}, idem.WithClock(clk), idem.WithLease(lease), idem.ReportTo(&res))
	if before != nil {
		t.Errorf("CheckLease within the lease: %v", before)
	}
	if !errors.Is(after, idem.ErrLeaseLost) {
		t.Errorf("CheckLease after a stall longer than the lease: %v, want ErrLeaseLost", after)
	}
	if !errors.Is(othersErr, idem.ErrInProgress) {
		t.Errorf("another Run while the stalled holder lives: %v, want ErrInProgress", othersErr)
	}
	if err != nil || res.Outcome != idem.Ran {
		t.Errorf("the stalled attempt's Run: %v, outcome %v; want its done mark written", err, res.Outcome)
	}
	if rec, ok, err := s.Lookup(ctx, k); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Errorf("record %+v, %v, %v; want done", rec, ok, err)
	}
}
