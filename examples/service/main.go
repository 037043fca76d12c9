// Command service is an HTTP service with two scheduled jobs inside it,
// run by an idem.Scheduler: every replica of the service runs the same
// Scheduler on one ledger, and each period runs once.
//
//	go run ./examples/service -addr localhost:8080
//	curl localhost:8080/healthz
//
// The jobs: "settle" settles yesterday (Shanghai time) at 02:00; "rollup"
// rolls up each hour (UTC) when it ends. /healthz serves the Scheduler's
// status as JSON: 200 when every job is ready, 503 when a period is unknown
// (it needs a person) or a job lags more than its tolerance. A parked
// period shows in the JSON but leaves the service ready: alert on it
// (idem_keys{status="parked"}) instead.
// SIGTERM or Ctrl-C stops it gracefully: the HTTP server and the Scheduler
// finish what they are doing (30 s at most) and record it.
//
// With several replicas on several hosts, open the Postgres ledger
// (module github.com/idemgo/idem/pgledger) instead of a SQLite file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // the business zone must not depend on the machine's zoneinfo

	"github.com/idemgo/idem"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "the HTTP address to listen on")
	ledger := flag.String("ledger", "service-ledger.db", "the SQLite ledger file (one host; use pgledger for several)")
	flag.Parse()
	if err := serve(*addr, *ledger); err != nil {
		log.Fatal(err)
	}
}

func serve(addr, ledgerPath string) error {
	l, err := idem.OpenLedger(ledgerPath)
	if err != nil {
		return err
	}
	defer l.Close()
	s, err := newScheduler(l, os.Stdout)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	mux.Handle("/healthz", s.Handler())
	srv := &http.Server{Addr: addr, Handler: mux}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		grace, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(grace)
		_ = s.Shutdown(grace)
	}()
	go func() {
		if err := s.Run(context.Background()); !errors.Is(err, idem.ErrSchedulerClosed) {
			log.Printf("scheduler: %v", err)
		}
	}()
	log.Printf("listening on %s; the ledger is %s", addr, ledgerPath)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newScheduler is the service's Scheduler and its two jobs; out is where
// the jobs report.
func newScheduler(l *idem.Ledger, out io.Writer, opts ...idem.Option) (*idem.Scheduler, error) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		return nil, err
	}
	s := idem.NewScheduler(l, opts...)
	settle := func(ctx context.Context, day idem.Period) error {
		// Settle the business day day.Name ("2026-10-27"), from
		// day.Start to day.End, Shanghai time.
		fmt.Fprintf(out, "settled %s\n", day.Name)
		return nil
	}
	// Yesterday, at 02:00 Shanghai time; unready if still not settled at 04:00.
	if err := s.Add("settle", idem.Daily(shanghai), settle,
		idem.DueAfter(2*time.Hour), idem.WithLagTolerance(2*time.Hour)); err != nil {
		return nil, err
	}
	rollup := func(ctx context.Context, hour idem.Period) error {
		fmt.Fprintf(out, "rolled up %s\n", hour.Name)
		return nil
	}
	// Each hour once it ends; replicas spread over 10 s.
	if err := s.Add("rollup", idem.Hourly(time.UTC), rollup, idem.WithJitter(10*time.Second)); err != nil {
		return nil, err
	}
	return s, nil
}
