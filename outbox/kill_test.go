package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
)

// TestOutboxRelayKilledMidDelivery: a relay process is SIGKILLed while
// the receiver holds one of its webhook requests (the message arrived, the
// relay never learned it). After a restart (here: a relay in the test's
// process, once the dead relay's leases have run out) every message
// arrives, the interrupted one a second time with the same
// Idempotency-Key, each topic in order: at least once, nothing lost.
func TestOutboxRelayKilledMidDelivery(t *testing.T) {
	t.Parallel()
	for _, killAt := range []int{1, 5, 12} {
		t.Run(fmt.Sprintf("request%d", killAt), func(t *testing.T) {
			t.Parallel()
			testRelayKilled(t, killAt)
		})
	}
}

type received struct{ id, topic, body string }

func testRelayKilled(t *testing.T, killAt int) {
	dir := t.TempDir()
	if idemtest.IsChild(t) {
		// The child: a relay until it is killed.
		idemtest.Start(t, "", func(arg string) {
			dir, url, _ := strings.Cut(arg, "|")
			l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
			if err != nil {
				fmt.Println("open:", err)
				os.Exit(2)
			}
			err = outbox.Relay(context.Background(), l, outbox.Webhook(url, nil), outbox.WithPoll(5*time.Millisecond), outbox.WithBatch(2))
			fmt.Println("relay returned:", err)
			os.Exit(3)
		})
	}
	ctx := context.Background()
	l := openLedger(t, dir)
	const topics, per = 3, 4
	for i := range per {
		key := idem.Key{Job: "notify", Period: fmt.Sprintf("2026-11-%02d", i+1)}
		err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
			for tp := range topics {
				if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: fmt.Sprintf("t%d", tp), Payload: []byte(fmt.Sprintf("%s t%d", key.Period, tp))}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu      sync.Mutex
		got     []received
		child   *idemtest.Child
		started = make(chan struct{})
		killed  = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{r.Header.Get("Idempotency-Key"), r.Header.Get("Idem-Topic"), string(body)})
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
	child = idemtest.Start(t, dir+"|"+srv.URL, nil)
	close(started)
	testwait.Recv(t, killed, "the receiver to get request %d and kill the relay", killAt)
	if e := child.Wait(); !e.Killed {
		t.Fatalf("relay child: %+v", e)
	}
	mu.Lock()
	interrupted := got[killAt-1]
	mu.Unlock()

	// The restart: a relay whose clock is past the dead relay's leases.
	clk := idemtest.NewClock(time.Now().Add(2 * outbox.DefaultLease))
	res, err := outbox.RelayOnce(ctx, l, outbox.Webhook(srv.URL, nil), outbox.WithClock(clk))
	if err != nil {
		t.Fatalf("relay after the restart: %v (%+v)", err, res)
	}

	recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != topics*per {
		t.Fatalf("%d messages stored, want %d", len(recs), topics*per)
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, g := range got {
		count[g.id]++
	}
	for _, r := range recs {
		if r.Status != "delivered" || count[r.ID] == 0 {
			t.Fatalf("message %s (%s): %s, received %d times", r.ID, r.Payload, r.Status, count[r.ID])
		}
	}
	if count[interrupted.id] < 2 {
		t.Fatalf("the interrupted message %s was received %d times, want again after the restart", interrupted.id, count[interrupted.id])
	}
	// Per topic, the first arrivals in the stored order.
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
