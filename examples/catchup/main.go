// Command catchup shows a daily job whose host was down for three days: when
// it comes back, one catch-up call settles the three missed days in order,
// and running the same command again does nothing.
//
//	go run ./examples/catchup
//
// The business calendar is America/Chicago; each run settles the days that
// have ENDED there, whatever the host's clock zone. The "now" of each step
// is fixed so the output is the same on every machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"
	_ "time/tzdata" // the business zone must not depend on the machine's zoneinfo

	"github.com/idemgo/idem"
)

// clock is a settable idem.Clock for the demo.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time                         { return c.now }
func (c *clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func main() {
	dirFlag := flag.String("dir", "", "keep the ledger in this directory (default: a temporary one, removed at exit)")
	flag.Parse()
	log.SetFlags(0)
	dir := *dirFlag
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idem-catchup-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if _, err := demo(dir); err != nil {
		log.Fatal(err)
	}
}

// demo returns every period settled, in order.
func demo(dir string) ([]string, error) {
	chicago, err := time.LoadLocation("America/Chicago")
	if err != nil {
		return nil, err
	}
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return nil, err
	}
	defer l.Close()
	sched := idem.Daily(chicago)
	clk := &clock{}
	var settled []string

	// The command cron runs every day at 02:00: catch up the daily settlement.
	command := func(at time.Time) error {
		clk.now = at
		fmt.Printf("%s  idem.CatchUp(daily_settle)\n", at.Format("Mon 2006-01-02 15:04 MST"))
		res, err := idem.CatchUp(context.Background(), l, "daily_settle", sched,
			func(ctx context.Context, p idem.Period) error {
				settled = append(settled, p.Name)
				fmt.Printf("    settling %s (%s .. %s, %v)\n", p.Name,
					p.Start.Format("15:04 MST"), p.End.Format("Jan 2 15:04 MST"), p.End.Sub(p.Start))
				return nil
			}, idem.WithClock(clk))
		if err != nil {
			return err
		}
		if len(res.Periods) == 0 {
			fmt.Println("    nothing due")
		}
		fmt.Printf("    cursor: %s\n", res.Cursor)
		return nil
	}

	at := func(day, hour int) time.Time { return time.Date(2026, 10, day, hour, 0, 0, 0, chicago) }
	fmt.Println("day 1: the job runs as scheduled")
	if err := command(at(28, 2)); err != nil {
		return nil, err
	}
	fmt.Println("\nthe host is down from Oct 28 03:00 until Oct 31 09:00: the 02:00 runs of Oct 29, 30 and 31 never happen")
	fmt.Println("\nthe host is back; its boot runs the command once (systemd's Persistent=true, or an @reboot line)")
	if err := command(at(31, 9)); err != nil {
		return nil, err
	}
	fmt.Println("\nsomeone runs the same command again by hand")
	if err := command(at(31, 9).Add(5 * time.Minute)); err != nil {
		return nil, err
	}
	fmt.Println("\nthe next scheduled run; Nov 1 is the 25-hour day of the fall-back")
	if err := command(time.Date(2026, 11, 2, 2, 0, 0, 0, chicago)); err != nil {
		return nil, err
	}
	return settled, nil
}
