package idemtest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
)

// TestEveryCrashPointSkipsUnreachedPoints: a SQLite ledger has no mid-write
// and no after-rename point; EveryCrashPoint skips those subtests, saying
// so, instead of passing them untested, and runs the others to the end.
func TestEveryCrashPointSkipsUnreachedPoints(t *testing.T) {
	t.Parallel()
	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	subtests := map[idemstore.Point]*testing.T{}
	recovered := map[idemstore.Point]bool{}
	idemtest.EveryCrashPoint(t, func(t *testing.T, c *idemtest.Crash) {
		subtests[c.Point] = t
		l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		job := func(ctx context.Context) error {
			return l.Run(ctx, key, func(context.Context) error { return nil }, c.Option())
		}
		if _, err := c.Crash(job); err != nil {
			t.Fatal(err)
		}
		if err := c.Recover(job); err != nil {
			t.Fatal(err)
		}
		recovered[c.Point] = true
	})
	for _, p := range idemstore.Points() {
		st := subtests[p]
		if st == nil {
			t.Fatalf("no subtest for %s", p)
		}
		unreached := p == idemstore.MidWrite || p == idemstore.AfterRename
		if st.Skipped() != unreached || recovered[p] == unreached {
			t.Errorf("%s: skipped %v, ran to the end %v; want skipped %v", p, st.Skipped(), recovered[p], unreached)
		}
	}
}
