package idemtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// gateway is a fake mail gateway that remembers what it accepted.
type gateway struct{ sent map[string]int }

func (g *gateway) Send(ctx context.Context, id string) error { g.sent[id]++; return nil }
func (g *gateway) Has(ctx context.Context, k idem.Key) (bool, error) {
	return g.sent[k.RequestID()] > 0, nil
}

// Prove that a report job sends its mail exactly once, whatever step a
// crash interrupts. In a test, idemtest.EveryCrashPoint(t, ...) does the
// same with one subtest per point.
func ExampleEachCrashPoint() {
	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	err := idemtest.EachCrashPoint(func(c *idemtest.Crash) error {
		dir, _ := os.MkdirTemp("", "report")
		defer os.RemoveAll(dir)
		s, _ := idem.OpenStateFile(filepath.Join(dir, "state.json"))
		gw := &gateway{sent: map[string]int{}}
		job := func(ctx context.Context) error {
			return s.Run(ctx, key, func(ctx context.Context) error { return gw.Send(ctx, key.RequestID()) },
				idem.TwoPhase(gw.Has), c.Option())
		}
		reached, _ := c.Crash(job)
		if err := c.Recover(job); err != nil {
			return err
		}
		if n := gw.sent[key.RequestID()]; n != 1 {
			return fmt.Errorf("sent %d mails", n)
		}
		fmt.Printf("%-12s crashed=%v sent=1\n", c.Point, reached)
		return nil
	})
	fmt.Println("invariant holds at every point:", err == nil)
	// Output:
	// before-claim crashed=true sent=1
	// after-claim  crashed=true sent=1
	// mid-write    crashed=true sent=1
	// after-rename crashed=true sent=1
	// after-fn     crashed=true sent=1
	// after-done   crashed=true sent=1
	// invariant holds at every point: true
}
