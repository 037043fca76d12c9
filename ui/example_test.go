package ui_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/ui"
)

// A service mounts the page under a path of its own. Here a loopback test
// server stands in for the service's listener.
func Example() {
	dir, err := os.MkdirTemp("", "idem-ui")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	ledger, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	_ = ledger.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error { return nil })

	page, err := ui.New(ledger, ui.Options{
		Actions:   true, // resolve, reset, outbox retry/drop: confirmed, CSRF-checked, logged
		Schedules: map[string]idem.Schedule{"settle": idem.Daily(time.UTC)},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/idem/", http.StripPrefix("/idem", page))
	// A service: http.ListenAndServe("127.0.0.1:8080", mux). Without
	// Options.Token only loopback clients are served.

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/idem/job?job=settle")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	fmt.Println(resp.Status, strings.Contains(b.String(), "2026-10-27"))
	// Output: 200 OK true
}
