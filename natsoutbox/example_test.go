package natsoutbox_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/natsoutbox"
	"github.com/idemgo/idem/outbox"
)

// A relay of the ledger's outbox to the JetStream stream ORDERS (subjects
// orders.>): a message of topic "paid" is published to orders.paid with
// Nats-Msg-Id set to its id. (Compiled, not run: it needs a server;
// TestRelayToJetStream runs the same against one.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ledger, err := idem.OpenLedger("ledger.db")
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()

	d, err := natsoutbox.FromURL("nats://127.0.0.1:4222/?stream=ORDERS&subject_prefix=orders.")
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	// Each message waits for the stream's ack; a copy re-sent after a
	// relay crash, within the stream's duplicate window, is dropped.
	if err := outbox.Relay(ctx, ledger, d, outbox.WithConcurrency(4)); err != nil {
		log.Fatal(err)
	}
}
