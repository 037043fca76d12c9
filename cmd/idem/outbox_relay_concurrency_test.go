//go:build unix

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
)

// TestOutboxRelayConcurrency: 'idem outbox relay --concurrency 2 --rate'
// posts two topics at once (the receiver holds the first two requests
// until both arrived), still delivers each topic in order, and paces by
// the shared rate.
func TestOutboxRelayConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ids := e.sqlitePut() // payments, poison, payments
	var (
		mu   sync.Mutex
		got  []string
		n    int
		both = make(chan struct{})
	)
	met := make(chan bool, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		topic := r.Header.Get("Idem-Topic")
		mu.Lock()
		got = append(got, topic+" "+r.Header.Get("Idempotency-Key"))
		n++
		k := n
		mu.Unlock()
		switch k {
		case 1:
			select { // the barrier: the first request waits for a second one
			case <-both:
				met <- true
			case <-time.After(30 * time.Second):
				met <- false
			}
		case 2:
			close(both)
		}
		if topic == "poison" {
			http.Error(w, "no such account", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	relay, stderr := e.relay("--webhook", srv.URL, "--poll", "10ms", "--concurrency", "2", "--rate", "cli-relay=50,2")
	if !testwait.Recv(t, met, "the first request to be answered") {
		t.Fatalf("two requests were never in flight at once with --concurrency 2; got %v", got)
	}
	testwait.Until(t, func() bool {
		m := e.outboxLs()
		return m[ids[0]].Status == "delivered" && m[ids[2]].Status == "delivered" && m[ids[1]].Status == "parked"
	}, "the relay to deliver both payments messages and park the poison one")
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(relay, stderr); err != nil {
		t.Fatalf("relay after SIGTERM: %v\n%s", err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	var payments []string
	for _, g := range got {
		if strings.HasPrefix(g, "payments ") {
			payments = append(payments, strings.TrimPrefix(g, "payments "))
		}
	}
	if !slices.Equal(payments, []string{ids[0], ids[2]}) {
		t.Fatalf("payments posted as %v, want %v: in order, each once", payments, []string{ids[0], ids[2]})
	}
}
