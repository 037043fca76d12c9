package prom_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/prom"
	"github.com/prometheus/client_golang/prometheus"
)

func ExampleNewOutbox() {
	dir, err := os.MkdirTemp("", "idem-prom-outbox-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	reg := prometheus.NewRegistry() // in a service: prometheus.DefaultRegisterer, served by promhttp
	o, err := prom.NewOutbox(reg)
	if err != nil {
		log.Fatal(err)
	}
	o.Watch(l)

	ctx := context.Background()
	err = l.RunTx(ctx, idem.Key{Job: "daily_settle", Period: "2026-10-27"}, func(ctx context.Context, tx *sql.Tx) error {
		// ... the settlement's writes, then its notification:
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "payments", Payload: []byte(`{"biz_date":"2026-10-27"}`)})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	show := func() {
		mfs, err := reg.Gather()
		if err != nil {
			log.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "idem_outbox_messages" && mf.GetName() != "idem_outbox_deliveries_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				if v == 0 {
					continue
				}
				fmt.Printf("%s{", mf.GetName())
				for i, lp := range m.GetLabel() {
					if i > 0 {
						fmt.Print(",")
					}
					fmt.Printf("%s=%q", lp.GetName(), lp.GetValue())
				}
				fmt.Printf("} %v\n", v)
			}
		}
	}
	show()
	// A relay (here one pass) posts it; the receiver accepts it.
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error { return nil })
	if _, err := outbox.RelayOnce(ctx, l, deliver, o.RelayOption()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the relay:")
	show()
	// Output:
	// idem_outbox_messages{status="pending",topic="payments"} 1
	// after the relay:
	// idem_outbox_deliveries_total{outcome="delivered",topic="payments"} 1
	// idem_outbox_messages{status="delivered",topic="payments"} 1
}
