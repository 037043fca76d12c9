package pgledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// BenchmarkWakePoll is one poll of a Scheduler (idemstore.Waker.Woken)
// on a ledger with 1 or 1,000 jobs ever woken and nothing new: what every
// running Scheduler costs the server each idem.SchedulerWakePoll. A
// Lookup of a record is the yardstick.
func BenchmarkWakePoll(b *testing.B) {
	pool := newPool(b)
	ctx := context.Background()
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("marks=%d", n), func(b *testing.B) {
			l := openLedger(b, pool)
			for i := range n {
				if err := idem.Wake(ctx, l, fmt.Sprintf("job-%04d", i)); err != nil {
					b.Fatal(err)
				}
			}
			st, err := idemstore.Of(l)
			if err != nil {
				b.Fatal(err)
			}
			w := st.(idemstore.Waker)
			_, mark, err := w.Woken(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if jobs, _, err := w.Woken(ctx, mark); err != nil || len(jobs) != 0 {
					b.Fatal(jobs, err)
				}
			}
		})
	}
	b.Run("lookup", func(b *testing.B) {
		l := openLedger(b, pool)
		for b.Loop() {
			if _, _, err := l.Lookup(ctx, idem.Key{Job: "job", Period: "2026-10-27"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
