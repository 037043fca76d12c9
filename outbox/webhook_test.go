package outbox_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/outbox"
)

// TestWebhookThroughRelay: a relay with the webhook parks a message the
// receiver rejects with 422 and delivers the others, which the receiver,
// deduping by Idempotency-Key, applies once each.
func TestWebhookThroughRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	var mu sync.Mutex
	applied := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == "poison" {
			http.Error(w, "cannot parse", http.StatusUnprocessableEntity)
			return
		}
		mu.Lock()
		applied[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	}))
	defer srv.Close()
	key := idem.Key{Job: "hooks", Period: "p"}
	err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		for _, p := range []string{"a", "poison", "b"} {
			if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t-" + p, Payload: []byte(p)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := idemtest.NewClock(t0)
	res, err := outbox.RelayOnce(ctx, l, outbox.Webhook(srv.URL, srv.Client()), outbox.WithClock(clk))
	if err != nil || res.Delivered != 2 || res.Parked != 1 {
		t.Fatalf("relay: %+v, %v", res, err)
	}
	parked, err := l.ListOutbox(ctx, idemstore.OutboxFilter{Status: idemstore.OutboxParked})
	if err != nil || len(parked) != 1 || parked[0].ID != key.RequestID()+"-1" || parked[0].Attempts != 1 {
		t.Fatalf("parked %+v, %v", parked, err)
	}
	if len(applied) != 2 || applied[key.RequestID()+"-0"] != 1 || applied[key.RequestID()+"-2"] != 1 {
		t.Fatalf("applied %v", applied)
	}
}
