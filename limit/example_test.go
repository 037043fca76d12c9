package limit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/limit"
)

// Every replica of a service mails the merchants of the day it settled;
// the mail provider takes 200 messages a second from all of them together,
// and the database two reports at once. Each replica names the same
// limits in the ledger they share.
func Example() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	mail, err := limit.NewRate(l, "mail-provider", 200, 20) // 200/s, 20 at once after a quiet time
	if err != nil {
		log.Fatal(err)
	}
	reports, err := limit.NewAtOnce(l, "report-db", 2, 30*time.Second) // two at once, each place leased 30 s
	if err != nil {
		log.Fatal(err)
	}

	merchants := idem.Items(slices.Values([]string{"m-001", "m-002", "m-003"}))
	res, err := idem.Each(ctx, l, idem.Key{Job: "mail", Period: "2026-12-01"}, merchants,
		func(ctx context.Context, merchant string) error {
			return nil // send the merchant's statement
		}, idem.WithLimits(mail))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mailed", res.Counts.Done, "merchants")

	err = idem.RunOn(ctx, l, idem.Key{Job: "report", Period: "2026-12-01"}, func(ctx context.Context) error {
		return nil // build the report; ctx ends if the place is lost
	}, idem.WithLimits(reports))
	fmt.Println("report:", err)
	// Output:
	// mailed 3 merchants
	// report: <nil>
}
