package idem_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// A daily job triggered by cron calls CatchUp instead of Run: after three
// days of downtime, its next trigger settles the days it missed, oldest
// first. (A fake clock stands for the days passing.)
func ExampleCatchUp() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	settle := func(ctx context.Context, p idem.Period) error {
		fmt.Println("settling", p.Name)
		return nil
	}
	daily := idem.Daily(time.UTC)
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))

	// The job's first trigger, at 02:00 on 28 October: the day that ended.
	if _, err := idem.CatchUp(context.Background(), l, "daily_settle", daily, settle, idem.WithClock(clk)); err != nil {
		log.Fatal(err)
	}
	// The host is down until 02:00 on 31 October.
	clk.Advance(3 * 24 * time.Hour)
	res, err := idem.CatchUp(context.Background(), l, "daily_settle", daily, settle, idem.WithClock(clk))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Count(idem.Ran), "periods ran; cursor", res.Cursor)
	// Output:
	// settling 2026-10-27
	// settling 2026-10-28
	// settling 2026-10-29
	// settling 2026-10-30
	// 3 periods ran; cursor 2026-10-30
}
