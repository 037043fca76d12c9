package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/limit"
	"github.com/idemgo/idem/outbox"
)

// A relay posting to a slow receiver delivers four topics side by side
// (WithConcurrency), each topic still in order, paced by a rate that every
// relay process naming "crm" in the ledger shares (WithLimits).
func ExampleWithConcurrency() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	ledger, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	ctx := context.Background()
	for day := range 3 {
		err := ledger.RunTx(ctx, idem.Key{Job: "sync", Period: fmt.Sprintf("2026-10-2%d", day)}, func(ctx context.Context, tx *sql.Tx) error {
			for _, account := range []string{"acme", "globex", "initech", "umbrella"} {
				if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: account, Payload: []byte(fmt.Sprint(day))}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string][]string{}
	slow := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		time.Sleep(20 * time.Millisecond) // the receiver takes its time
		mu.Lock()
		defer mu.Unlock()
		got[d.Topic] = append(got[d.Topic], string(d.Payload))
		return nil
	})

	crm, err := limit.NewRate(ledger, "crm", 100, 4) // 100 posts a second, shared
	if err != nil {
		log.Fatal(err)
	}
	res, err := outbox.RelayOnce(ctx, ledger, slow, outbox.WithConcurrency(4), outbox.WithLimits(crm))
	fmt.Printf("relay: %d delivered, %v\n", res.Delivered, err)
	for _, topic := range slices.Sorted(maps.Keys(got)) {
		fmt.Println(topic, got[topic])
	}
	// Output:
	// relay: 12 delivered, <nil>
	// acme [0 1 2]
	// globex [0 1 2]
	// initech [0 1 2]
	// umbrella [0 1 2]
}
