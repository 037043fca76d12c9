package pgledger_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/jackc/pgx/v5"
)

// TestOutboxRelayKilledMidDelivery is the root package's test of that name
// on Postgres: a relay process is SIGKILLed while the receiver holds one of
// its webhook requests; after the restart every message arrives, the
// interrupted one again with the same Idempotency-Key, each topic in order.
func TestOutboxRelayKilledMidDelivery(t *testing.T) {
	testDSN(t)
	for _, killAt := range []int{1, 6} {
		t.Run(fmt.Sprintf("request%d", killAt), func(t *testing.T) {
			if idemtest.IsChild(t) {
				idemtest.Start(t, "", func(arg string) { // does not return
					schema, url, _ := strings.Cut(arg, "|")
					l, err := openChildLedger(context.Background(), eachEnv{schema: schema})
					if err != nil {
						fmt.Println(err)
						os.Exit(2)
					}
					err = outbox.Relay(context.Background(), l, outbox.Webhook(url, nil), outbox.WithPoll(5*time.Millisecond), outbox.WithBatch(2))
					fmt.Println("relay returned:", err)
					os.Exit(3)
				})
			}
			testPGRelayKilled(t, killAt)
		})
	}
}

func testPGRelayKilled(t *testing.T, killAt int) {
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	const topics, per = 3, 3
	for i := range per {
		key := idem.Key{Job: "notify", Period: fmt.Sprintf("2026-11-%02d", i+1)}
		err := l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
			for tp := range topics {
				if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: fmt.Sprintf("t%d", tp), Payload: []byte(key.Period)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	type received struct{ id, topic string }
	var (
		mu      sync.Mutex
		got     []received
		child   *idemtest.Child
		started = make(chan struct{})
		killed  = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, received{r.Header.Get("Idempotency-Key"), r.Header.Get("Idem-Topic")})
		n := len(got)
		mu.Unlock()
		if n == killAt {
			<-started
			child.Kill() // before answering: the message arrived, the relay never knows
			close(killed)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	child = idemtest.Start(t, l.Schema()+"|"+srv.URL, nil)
	close(started)
	testwait.Recv(t, killed, "the receiver to get request %d and kill the relay", killAt)
	if e := child.Wait(); !e.Killed {
		t.Fatalf("relay child: %+v", e)
	}
	mu.Lock()
	interrupted := got[killAt-1].id
	mu.Unlock()
	shift(t, l, 2*outbox.DefaultLease) // past the dead relay's leases, on the server's clock
	if res, err := outbox.RelayOnce(ctx, l, outbox.Webhook(srv.URL, nil)); err != nil {
		t.Fatalf("relay after the restart: %v (%+v)", err, res)
	}
	recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(recs) != topics*per {
		t.Fatalf("%d messages stored, %v; want %d", len(recs), err, topics*per)
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, g := range got {
		count[g.id]++
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxDelivered || count[r.ID] == 0 {
			t.Fatalf("message %s: %s, received %d times", r.ID, r.Status, count[r.ID])
		}
	}
	if count[interrupted] < 2 {
		t.Fatalf("the interrupted message %s was received %d times, want again after the restart", interrupted, count[interrupted])
	}
	for tp := range topics {
		topic := fmt.Sprintf("t%d", tp)
		var first, want []string
		for _, g := range got {
			if g.topic == topic && !slices.Contains(first, g.id) {
				first = append(first, g.id)
			}
		}
		for _, r := range recs {
			if r.Topic == topic {
				want = append(want, r.ID)
			}
		}
		if !slices.Equal(first, want) {
			t.Fatalf("topic %s arrived in the order %v, stored %v", topic, first, want)
		}
	}
}
