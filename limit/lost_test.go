package limit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
)

// renewFails is a limit store whose renewals fail: with an error (the
// store unreachable), or finding the place taken by another.
type renewFails struct {
	idemstore.LimitStore
	taken bool
}

func (s renewFails) RenewSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder, lease time.Duration) (bool, error) {
	if s.taken {
		return false, nil
	}
	return false, errors.New("connection refused")
}

// A run whose place is lost sees its context end with ErrSlotLost: when
// the store cannot renew the place for a whole lease, and at once when it
// finds the place taken by another.
func TestLostPlaceEndsTheRun(t *testing.T) {
	for _, taken := range []bool{false, true} {
		l := testledger.Open(t, t.TempDir())
		a, err := NewAtOnce(l, "settle", 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		a.s = renewFails{LimitStore: a.s, taken: taken}
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
		defer cancel()
		key := idem.Key{Job: "settle", Period: "2026-12-01"}
		var cause error
		err = idem.RunOn(ctx, l, key, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}, idem.WithLimits(a))
		if !errors.Is(cause, ErrSlotLost) || !errors.Is(err, ErrSlotLost) {
			t.Fatalf("taken %v: fn's context ended by %v, Run: %v; want ErrSlotLost", taken, cause, err)
		}
		if rec, _, _ := l.Lookup(ctx, key); rec.Status == idem.StatusDone || rec.Attempt != 1 {
			t.Fatalf("taken %v: record %+v; want attempt 1 not done", taken, rec)
		}
	}
}
