package rabbitoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/rabbitoutbox"
)

// ExampleFromURL relays a ledger's outbox to RabbitMQ (compiled here; run
// by TestExampleFromURL against the test broker).
func ExampleFromURL() {
	ctx := context.Background()
	ledger, err := idem.OpenLedger("ledger.db")
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	relayToRabbit(ctx, ledger, "amqp://relay:secret@mq.internal:5672/prod?exchange=events")
}

// relayToRabbit is the example of docs/outbox.md: it queues a message in a
// job's transaction and publishes it with one pass of the relay.
func relayToRabbit(ctx context.Context, ledger *idem.Ledger, brokerURL string) {
	err := ledger.RunTx(ctx, idem.Key{Job: "ship", Period: "2026-12-05"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "orders.shipped", Payload: []byte(`{"order":42}`)})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	pub, err := rabbitoutbox.FromURL(brokerURL) // routing key: the topic; message-id: the outbox id
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	res, err := outbox.RelayOnce(ctx, ledger, pub)
	fmt.Printf("relay: %d delivered, %d retrying, %v\n", res.Delivered, res.Retrying, err)
}

// TestExampleFromURL runs the example's relay against the test broker, an
// exchange bound to a queue for the topic.
func TestExampleFromURL(t *testing.T) {
	url := testURL(t)
	a := newAdmin(t, url)
	ex, q := unique("events"), unique("shipped")
	if err := a.ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	a.queue(q)
	if err := a.ch.QueueBind(q, "orders.*", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	ledger, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	stdout := os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout = w
	relayToRabbit(context.Background(), ledger, url+"?exchange="+ex)
	os.Stdout = stdout
	_ = w.Close()
	out := make([]byte, 200)
	n, _ := r.Read(out)
	if got := string(out[:n]); got != "relay: 1 delivered, 0 retrying, <nil>\n" {
		t.Fatalf("the example printed %q", got)
	}
	if d := a.get(q); string(d.Body) != `{"order":42}` || d.RoutingKey != "orders.shipped" {
		t.Fatalf("got %q with key %q", d.Body, d.RoutingKey)
	}
}
