package idemtest

// The kill kits: tests that SIGKILL a real process (this test binary,
// re-executed with Start) in the middle of its work and check what a store
// kept. KillHarness opens the store in the test and again in each child;
// TestEachRandomKills kills Each and EachTx at random moments (kill_each.go),
// TestRelayKilledMidDelivery kills an outbox relay while the receiver holds
// one of its requests.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
)

// KillHarness opens the store of a kill kit ([TestEachRandomKills],
// [TestRelayKilledMidDelivery]) in the test's process and in the child
// processes the kit starts and SIGKILLs.
type KillHarness[Tx any] struct {
	// Open returns a new, empty store in the test's process, closed when t
	// ends, and what Reopen needs to open the same store in another process
	// (a path, a schema's name). A kit calls it once per subtest, never in a
	// child. For TestEachRandomKills the store must hold Apply's business
	// table.
	Open func(t *testing.T) (s idem.TxStore[Tx], arg string)
	// Reopen opens the store that Open returned arg for, in a child process
	// (it has no *testing.T) or in the test's process beside Open's; done
	// releases it.
	Reopen func(ctx context.Context, arg string) (s idem.TxStore[Tx], done func(), err error)

	// Apply is TestEachRandomKills's business write for item in tx, a
	// transaction of s (its EachTx effect): one more application of item,
	// counted, NOT idempotent, so that a second application shows.
	Apply func(ctx context.Context, s idem.TxStore[Tx], tx Tx, item string) error
	// Applied returns the applications Apply committed in s, by item.
	Applied func(t *testing.T, s idem.TxStore[Tx]) map[string]int
	// ItemStatus, if set, returns the status the store recorded for key's
	// item ("done", "parked", "unknown", …): TestEachRandomKills then checks
	// the item that always fails.
	ItemStatus func(ctx context.Context, s idem.TxStore[Tx], key idem.Key, item string) (string, error)
	// NotDone, if set, describes the items of key that are not done, for a
	// failure's message.
	NotDone func(t *testing.T, s idem.TxStore[Tx], key idem.Key) string
	// ItemDetail, if set, describes what the store holds for key's item
	// (where its chunks have it and their positions, its own record), for
	// the message of a failure about that item, in place of ItemStatus.
	ItemDetail func(ctx context.Context, s idem.TxStore[Tx], key idem.Key, item string) string

	// Shift makes d pass for a store that keeps its outbox's leases on its
	// own clock (a database's now()), as [OutboxHarness.Shift] does;
	// TestRelayKilledMidDelivery calls it to expire the dead relay's
	// leases. Nil: the restarted relay's clock is moved instead.
	Shift func(t *testing.T, s idem.Store, d time.Duration)

	// SetUntilSeal: the store keeps the item set a caller records in
	// memory until the set is sealed (mysqlledger's turn to record), so a
	// process killed while it records leaves none of it. TestEachRandomKills
	// then wants no item recorded after that kill, instead of part of the
	// set.
	SetUntilSeal bool

	// Parallel runs a kit's subtests at once (t.Parallel). The stores Open
	// returns must then not share a bounded resource (a small connection
	// pool, say).
	Parallel bool
}

// killReceived is a webhook request the receiver got.
type killReceived struct{ id, topic, body string }

// TestRelayKilledMidDelivery proves that a relay killed mid-delivery loses
// nothing: an outbox relay (outbox.Relay with outbox.Webhook, in a child
// process) is SIGKILLed while the receiver holds one of its requests, the
// 1st, 5th or 12th of 12 messages on 3 topics (the message arrived, the
// relay never learned it), delivering one message at a time and, again,
// with outbox.WithConcurrency(4) (other deliveries in flight as it dies). After a restart (outbox.RelayOnce in the test's
// process, once the dead relay's leases have run out: h.Shift, or the
// relay's clock) every message is delivered and arrived with its payload,
// the interrupted one a second time with the same Idempotency-Key, and
// each topic's messages first arrived in the order they were stored: at
// least once, nothing lost.
//
// The store behind h.Open's ([idemstore.Of]) must be an
// idemstore.OutboxTxStore of Tx and an idemstore.OutboxStore.
func TestRelayKilledMidDelivery[Tx any](t *testing.T, h KillHarness[Tx]) {
	for _, conc := range []int{1, 4} {
		for _, killAt := range []int{1, 5, 12} {
			name := fmt.Sprintf("request%d", killAt)
			if conc > 1 {
				name += fmt.Sprintf("_concurrency%d", conc)
			}
			t.Run(name, func(t *testing.T) {
				if IsChild(t) {
					Start(t, "", relayChild(h)) // does not return
				}
				if h.Parallel {
					t.Parallel()
				}
				testRelayKilled(t, h, killAt, conc)
			})
		}
	}
}

// relayChild is the child of TestRelayKilledMidDelivery: a relay until it
// is killed. Its arg is the relay's concurrency, the receiver's URL, then
// Reopen's.
func relayChild[Tx any](h KillHarness[Tx]) func(string) {
	return func(arg string) {
		concArg, rest, _ := strings.Cut(arg, "|")
		url, storeArg, _ := strings.Cut(rest, "|")
		conc, err := strconv.Atoi(concArg)
		if err != nil {
			fmt.Println("concurrency:", err)
			os.Exit(2)
		}
		ctx := context.Background()
		s, _, err := h.Reopen(ctx, storeArg)
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		err = outbox.Relay(ctx, s, outbox.Webhook(url, nil), outbox.WithPoll(5*time.Millisecond), outbox.WithBatch(2*conc),
			outbox.WithConcurrency(conc))
		fmt.Println("relay returned:", err)
		os.Exit(3)
	}
}

func testRelayKilled[Tx any](t *testing.T, h KillHarness[Tx], killAt, conc int) {
	ctx := context.Background()
	s, storeArg := h.Open(t)
	st, err := idemstore.Of(s)
	if err != nil {
		t.Fatalf("idemtest: TestRelayKilledMidDelivery: %v", err)
	}
	ob, ok := st.(idemstore.OutboxStore)
	if !ok {
		t.Fatalf("idemtest: TestRelayKilledMidDelivery: the store %T is no idemstore.OutboxStore", st)
	}
	const topics, per = 3, 4
	for i := range per {
		key := idem.Key{Job: "notify", Period: fmt.Sprintf("2026-11-%02d", i+1)}
		err := s.RunTx(ctx, key, func(ctx context.Context, tx Tx) error {
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
		got     []killReceived
		child   *Child
		started = make(chan struct{})
		killed  = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, killReceived{r.Header.Get("Idempotency-Key"), r.Header.Get("Idem-Topic"), string(body)})
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
	child = Start(t, strconv.Itoa(conc)+"|"+srv.URL+"|"+storeArg, nil)
	close(started)
	testwait.Recv(t, killed, "the receiver to get request %d and kill the relay", killAt)
	if e := child.Wait(); !e.Killed {
		t.Fatalf("relay child: %+v", e)
	}
	mu.Lock()
	interrupted := got[killAt-1].id
	mu.Unlock()

	// The restart: a relay past the dead relay's leases, on the store's
	// clock or on its own.
	var opts []outbox.Option
	if h.Shift != nil {
		h.Shift(t, s, 2*outbox.DefaultLease)
	} else {
		opts = append(opts, outbox.WithClock(NewClock(time.Now().Add(2*outbox.DefaultLease))))
	}
	if res, err := outbox.RelayOnce(ctx, s, outbox.Webhook(srv.URL, nil), opts...); err != nil {
		t.Fatalf("relay after the restart: %v (%+v)", err, res)
	}

	recs, err := ob.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(recs) != topics*per {
		t.Fatalf("%d messages stored, %v; want %d", len(recs), err, topics*per)
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	payload := map[string]string{}
	for _, r := range recs {
		payload[r.ID] = string(r.Payload)
	}
	for _, g := range got {
		count[g.id]++
		if g.body != payload[g.id] {
			t.Fatalf("message %s arrived with %q, stored %q", g.id, g.body, payload[g.id])
		}
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxDelivered || count[r.ID] == 0 {
			t.Fatalf("message %s (%s): %s, received %d times", r.ID, r.Payload, r.Status, count[r.ID])
		}
	}
	if count[interrupted] < 2 {
		t.Fatalf("the interrupted message %s was received %d times, want again after the restart", interrupted, count[interrupted])
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
