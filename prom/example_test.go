package prom_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/prom"
	"github.com/prometheus/client_golang/prometheus"
)

func Example() {
	dir, err := os.MkdirTemp("", "idem-prom-example-")
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
	m, err := prom.New(reg, prom.WithLister(l))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	settle := func(context.Context) error { return nil }
	mail := func(context.Context) error { return idem.Permanent(errors.New("mail gateway refused the address")) }
	day := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	report := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	_ = l.Run(ctx, day, settle, m.Option())
	_ = l.Run(ctx, day, settle, m.Option())  // a duplicate trigger
	_ = l.Run(ctx, report, mail, m.Option()) // parks at once: a Permanent error

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "idem_runs_total", "idem_errors_total", "idem_keys":
			for _, mt := range mf.GetMetric() {
				if mf.GetName() == "idem_keys" && mt.GetGauge().GetValue() == 0 {
					continue
				}
				fmt.Print(mf.GetName(), "{")
				for i, lp := range mt.GetLabel() {
					if i > 0 {
						fmt.Print(",")
					}
					fmt.Printf("%s=%q", lp.GetName(), lp.GetValue())
				}
				fmt.Print("} ", mt.GetCounter().GetValue()+mt.GetGauge().GetValue(), "\n")
			}
		}
	}
	// Output:
	// idem_errors_total{job="daily_report"} 1
	// idem_errors_total{job="daily_settle"} 0
	// idem_keys{job="daily_report",status="parked"} 1
	// idem_runs_total{job="daily_report",outcome="parked"} 1
	// idem_runs_total{job="daily_settle",outcome="already_done"} 1
	// idem_runs_total{job="daily_settle",outcome="ran"} 1
}
