package natsoutbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/natsoutbox"
	"github.com/idemgo/idem/outbox"
)

// TestRelayKilledMidPublish: a relay process (outbox.Relay with the
// JetStream deliverer, on the SQLite ledger) SIGKILLs itself right after
// the stream acknowledged its 1st, 5th or 12th publish of 12 messages on 3
// topics, before the ledger marks it delivered (with
// outbox.WithConcurrency(4), other publishes may be in flight as it dies);
// then the nats-server is SIGKILLed and restarted on its files. A relay
// restarted past the dead one's leases publishes the interrupted message
// again, and the stream drops it: every message is in the stream exactly
// once, each topic in the order stored, all marked delivered.
func TestRelayKilledMidPublish(t *testing.T) {
	for _, conc := range []int{1, 4} {
		for _, killAt := range []int{1, 5, 12} {
			name := fmt.Sprintf("publish%d", killAt)
			if conc > 1 {
				name += fmt.Sprintf("_concurrency%d", conc)
			}
			t.Run(name, func(t *testing.T) {
				if idemtest.IsChild(t) {
					idemtest.Start(t, "", killChild) // does not return
				}
				t.Parallel()
				testRelayKilled(t, killAt, conc)
			})
		}
	}
}

// killChild is the relay of TestRelayKilledMidPublish: its arg is
// "conc|killAt|url|ledger directory".
func killChild(arg string) {
	parts := strings.SplitN(arg, "|", 4)
	conc, _ := strconv.Atoi(parts[0])
	killAt, _ := strconv.Atoi(parts[1])
	l, err := idem.OpenLedger(parts[3] + "/ledger.db")
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	d, err := natsoutbox.FromURL(parts[2])
	if err != nil {
		fmt.Println("nats:", err)
		os.Exit(2)
	}
	var acked atomic.Int32
	kill := outbox.DeliverFunc(func(ctx context.Context, dl outbox.Delivery) error {
		if err := d.Deliver(ctx, dl); err != nil {
			return err
		}
		if int(acked.Add(1)) == killAt {
			idemtest.Kill() // acknowledged by the stream, not marked in the ledger
		}
		return nil
	})
	err = outbox.Relay(context.Background(), l, kill, outbox.WithPoll(5*time.Millisecond), outbox.WithBatch(2*conc),
		outbox.WithConcurrency(conc))
	fmt.Println("relay returned:", err)
	os.Exit(3)
}

func testRelayKilled(t *testing.T, killAt, conc int) {
	srv := ownServer(t)
	js := jsOf(t, srv.url)
	prefix := unique("idemtest.") + "."
	stream := newStream(t, js, prefix, 2*time.Minute)
	dir := t.TempDir()
	l := openLedger(t, dir)
	ids := putMessages(t, l, "notify", 3, 4)
	url := srv.url + "/?stream=" + stream + "&subject_prefix=" + prefix

	child := idemtest.Start(t, fmt.Sprintf("%d|%d|%s|%s", conc, killAt, url, dir), nil)
	if e := child.Wait(); !e.Killed {
		t.Fatalf("relay child did not die of SIGKILL: %+v", e)
	}
	inStream := readStream(t, js, stream)
	if len(inStream) < killAt {
		t.Fatalf("%d messages in the stream after the relay died at its publish %d", len(inStream), killAt)
	}
	srv.crash()

	// The restart: a relay past the dead relay's leases (on its own clock).
	var (
		mu       sync.Mutex
		resent   = map[string]int{} // the restarted relay's deliveries
		wasStore = map[string]bool{}
	)
	for _, m := range inStream {
		wasStore[m.id] = true
	}
	d, err := natsoutbox.FromURL(url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	res, err := outbox.RelayOnce(ctx, l, d, outbox.WithClock(idemtest.NewClock(time.Now().Add(2*outbox.DefaultLease))),
		outbox.OnDelivery(func(r outbox.DeliveryResult) {
			mu.Lock()
			defer mu.Unlock()
			if r.Outcome == outbox.DeliverySent {
				resent[r.ID]++
			}
		}))
	if err != nil {
		t.Fatalf("relay after the restart: %v (%+v)", err, res)
	}
	again := 0
	for id := range resent {
		if wasStore[id] {
			again++ // published before the kill, and again now: the stream dropped it
		}
	}
	if again == 0 {
		t.Fatalf("the restarted relay published none of the %d messages the stream had again (%v): the kill hit no unmarked publish", len(inStream), resent)
	}

	got := readStream(t, js, stream)
	checkStream(t, got, ids, true)
	if len(got) != 12 {
		t.Errorf("%d messages in the stream, want 12", len(got))
	}
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.(idemstore.OutboxStore).ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(recs) != 12 {
		t.Fatalf("%d messages in the outbox, %v; want 12", len(recs), err)
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxDelivered {
			t.Errorf("message %s: %s, want delivered", r.ID, r.Status)
		}
	}
}
