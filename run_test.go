package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// TestBackingOffSaysWhenAndWhy: a trigger that finds the key backing off
// says until when, after which attempt, and why, as the run that failed
// did: not as a failure of its own.
func TestBackingOffSaysWhenAndWhy(t *testing.T) {
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk), idem.WithBackoff(idem.Constant(time.Second)), idem.OneAttempt())
	ctx := context.Background()
	const want = "idem: daily_settle/2026-10-27: backing off until 2026-10-28T02:00:01Z after attempt 1 failed: downstream down"
	calls := 0
	err := l.Run(ctx, key, func(context.Context) error { calls++; return errors.New("downstream down") })
	if !errors.Is(err, idem.ErrBackingOff) || err.Error() != want {
		t.Fatalf("the failing Run:\n got %v\nwant %s", err, want)
	}
	err = l.Run(ctx, key, func(context.Context) error { calls++; return nil }) // the next trigger, too early
	var ierr *idem.Error
	if !errors.Is(err, idem.ErrBackingOff) || !errors.As(err, &ierr) || calls != 1 {
		t.Fatalf("the next trigger: %v, fn ran %d times", err, calls)
	}
	if ierr.Attempt != 1 || !ierr.NotBefore.Equal(t0.Add(time.Second)) || ierr.Err == nil || ierr.Err.Error() != "downstream down" {
		t.Fatalf("the next trigger's error: %+v; want attempt 1, the stored NotBefore and last error", ierr)
	}
	if err.Error() != want {
		t.Fatalf("the next trigger:\n got %s\nwant %s", err, want)
	}
}
