package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/ui"
)

// BenchmarkJobPage (ui_job_page) renders the page of a job with 10,000
// daily periods (27 years; real Runs on a SQLite ledger), server-side:
// the job's summary, a page of its latest records, the grid of their
// months and the template.
func BenchmarkJobPage(b *testing.B) {
	ctx := context.Background()
	l, err := idem.OpenLedger(filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10_000 {
		k := idem.Key{Job: "settle", Period: day.AddDate(0, 0, i).Format(time.DateOnly)}
		if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	h, err := ui.New(l, ui.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, local(httptest.NewRequest(http.MethodGet, "/job?job=settle", nil)))
		if w.Code != http.StatusOK {
			b.Fatalf("%d", w.Code)
		}
	}
}
