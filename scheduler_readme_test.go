package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// startJobs is docs/scheduler.md's "Inside a Go service": a service's daily job at
// 02:00 Shanghai time, and its health check.
func startJobs(ctx context.Context, mux *http.ServeMux, path string, settle func(ctx context.Context, day string) error) (stop func(context.Context) error, err error) {
	ledger, err := idem.OpenLedger(path) // pgledger.New(ctx, pool) when replicas run on several hosts
	if err != nil {
		return nil, err
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		return nil, err
	}
	s := idem.NewScheduler(ledger)
	// Settle yesterday at 02:00 Shanghai time, once across all replicas.
	err = s.Add("settle", idem.Daily(shanghai), func(ctx context.Context, day idem.Period) error {
		return settle(ctx, day.Name) // "2026-10-27"; day.Start and day.End bound the day
	}, idem.DueAfter(2*time.Hour))
	if err != nil {
		return nil, err
	}
	go s.Run(ctx)
	mux.Handle("/healthz", s.Handler()) // 200 when ready; 503 when a job lags or a period is unknown
	return s.Shutdown, nil              // call it on SIGTERM: finishes what runs, starts nothing new
}

// TestReadmeService runs startJobs on the real clock: its first look
// settles the latest day due, at once.
func TestReadmeService(t *testing.T) {
	settled := make(chan string, 10)
	mux := http.NewServeMux()
	path := filepath.Join(t.TempDir(), "ledger.db")
	stop, err := startJobs(context.Background(), mux, path, func(ctx context.Context, day string) error {
		settled <- day
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	want := idem.LastPeriod(idem.Daily(shanghai), time.Now().Add(-2*time.Hour)).Name
	if got := testwait.Recv(t, settled, "the first look to settle %s", want); got != want {
		t.Errorf("settled %s, want %s", got, want)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 {
		t.Errorf("/healthz: %d %s", rec.Code, rec.Body)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := openLedger(t, filepath.Dir(path))
	if rec := mustLookup(t, l, idem.Key{Job: "settle", Period: want}); rec.Status != idem.StatusDone {
		t.Errorf("%s: %s, want done", want, rec.Status)
	}
}
