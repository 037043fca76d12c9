package idem_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
)

// The package-level Run uses the store given to SetDefault at start-up
// (without one, a ledger at $IDEM_LEDGER or DefaultLedgerPath). A second
// trigger for the same period does nothing.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	idem.SetDefault(l)
	defer idem.SetDefault(nil)

	key := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	for range 2 {
		err := idem.Run(context.Background(), key, func(ctx context.Context) error {
			fmt.Println("sending the report for", key.Period)
			return nil
		})
		fmt.Println("err:", err)
	}
	// Output:
	// sending the report for 2026-10-27
	// err: <nil>
	// err: <nil>
}
