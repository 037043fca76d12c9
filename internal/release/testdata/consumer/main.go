// A program of a user of idem, built by scripts/release-check.sh against
// modules from a module proxy: the root, pgledger, redisstore, prom, otel
// and ui together. It runs a job once on a SQLite ledger with Prometheus
// metrics and OpenTelemetry, serves the operator page on a test request,
// and names the Postgres and Redis stores' constructors (no server here).
package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/pgledger"
	"github.com/idemgo/idem/prom"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/ui"
	"github.com/prometheus/client_golang/prometheus"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

var _, _ = pgledger.Open, redisstore.Open

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "consumer")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer l.Close()
	m, err := prom.New(prometheus.NewRegistry())
	if err != nil {
		return err
	}
	tel, err := idemotel.New(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider())
	if err != nil {
		return err
	}
	runs := 0
	key := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	for range 3 {
		if err := l.Run(tel.Context(ctx), key, func(context.Context) error { runs++; return nil }, m.Option(), tel.Option()); err != nil {
			return err
		}
	}
	if runs != 1 {
		return fmt.Errorf("fn ran %d times for one key, want 1", runs)
	}
	page, err := ui.New(l, ui.Options{})
	if err != nil {
		return err
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	req.RemoteAddr = "127.0.0.1:40000" // the page serves loopback clients without a token
	page.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("the operator page answered %d", rec.Code)
	}
	fmt.Println("consumer: ran once in 3 calls; metrics, tracing and the operator page work")
	return nil
}
