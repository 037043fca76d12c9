package idem_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/idemgo/idem/fanout"

	"github.com/idemgo/idem"
)

// Each does a period's work item by item, each item once: here, a day's
// points for every account. Run twice, as a retried cron job would be, it
// grants them once.
func ExampleEach() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	var mu sync.Mutex
	granted := map[string]int{} // the downstream: points by account
	grant := func(ctx context.Context, account string) error {
		mu.Lock() // fn runs on several workers at once
		defer mu.Unlock()
		granted[account] += 10
		return nil
	}
	accounts := fanout.Items(slices.Values([]string{"a1", "a2", "a3"}))
	key := idem.Key{Job: "daily_points", Period: "2026-10-27"}
	for range 2 {
		res, err := fanout.Each(context.Background(), l, key, accounts, grant)
		fmt.Println(res.Outcome, res.Counts.Done, "items done, err:", err)
	}
	fmt.Println(granted)
	// Output:
	// ran 3 items done, err: <nil>
	// already_done 3 items done, err: <nil>
	// map[a1:10 a2:10 a3:10]
}
