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

// A service runs a daily settlement on a Scheduler: at its first look the
// job catches up on the day that ended, and every replica of the service
// could run the same Scheduler on the same ledger without settling a day
// twice. (A fake clock stands for the time of day.)
func ExampleScheduler() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	clk := idemtest.NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	settled := make(chan string, 1)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	err = s.Add("daily_settle", idem.Daily(time.UTC), func(ctx context.Context, p idem.Period) error {
		settled <- p.Name
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	go s.Run(context.Background())
	defer s.Shutdown(context.Background())
	select {
	case day := <-settled:
		fmt.Println("settled", day)
	case <-time.After(time.Minute):
		log.Fatal("no day settled within a minute")
	}
	// Output: settled 2026-10-27
}
