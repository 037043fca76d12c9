package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// pausedClock is the clock of a process that stalls (a long GC pause, a
// frozen VM): its time jumps while no timer fires, so the heartbeat does
// not renew the lease meanwhile.
type pausedClock struct{ *idemtest.Clock }

func (pausedClock) After(time.Duration) <-chan time.Time { return nil }

// Right before a payment that cannot be undone, fn checks that its attempt
// still holds the key. This process stalled past its lease (another process
// may have taken the key over and paid), so fn refuses, and says that
// nothing happened: the attempt is a plain failure, retried later, not an
// unknown outcome for a person to check.
func ExampleCheckLease() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	clk := pausedClock{idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))}
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"), idem.WithClock(clk))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	pay := func(ctx context.Context) error {
		clk.Advance(2 * idem.DefaultLease) // the stall
		if err := idem.CheckLease(ctx); err != nil {
			fmt.Println("refused:", err)
			return idem.NothingHappened(err)
		}
		fmt.Println("paying")
		return nil
	}
	key := idem.Key{Job: "payout", Period: "2026-10-27"}
	err = l.Run(context.Background(), key, pay, idem.AtMostOnce(), idem.OneAttempt())
	fmt.Println("backing off:", errors.Is(err, idem.ErrBackingOff))
	rec, _, _ := l.Lookup(context.Background(), key)
	fmt.Println("record:", rec.Status)
	// Output:
	// refused: idem: lease lost: attempt 1 of payout/2026-10-27: its lease ran out at 2026-10-28T02:01:00Z without a renewal (the process stalled)
	// backing off: true
	// record: failed
}
