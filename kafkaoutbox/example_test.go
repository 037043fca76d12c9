package kafkaoutbox_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/kafkaoutbox"
	"github.com/idemgo/idem/outbox"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A relay of the ledger's outbox to Kafka: a message of topic "paid" is a
// record of the Kafka topic orders.paid, keyed "paid", with its id in the
// Idem-Message-Id header. (Compiled, not run: it needs brokers;
// TestRelayToKafka runs the same against kfake.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ledger, err := idem.OpenLedger("ledger.db")
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()

	d, err := kafkaoutbox.FromURL("kafka://kafka1:9092,kafka2:9092/?topic_prefix=orders.")
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := outbox.Relay(ctx, ledger, d, outbox.WithConcurrency(4)); err != nil {
		log.Fatal(err)
	}
}

// The consumer's side: delivery is at least once (a relay that crashed
// after Kafka's ack produces the message again), so apply a record only if
// its Idem-Message-Id is new, in the same transaction as its effect.
// (Compiled, not run.)
func Example_consumer() {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers("kafka1:9092"), kgo.ConsumeTopics("orders.paid"), kgo.ConsumerGroup("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	for {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == kafkaoutbox.HeaderMessageID {
					applyOnce(ctx, string(h.Value), r.Value) // e.g. INSERT ... ON CONFLICT (message_id) DO NOTHING
				}
			}
		})
	}
}

func applyOnce(ctx context.Context, id string, payload []byte) {}
