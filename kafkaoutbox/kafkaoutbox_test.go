package kafkaoutbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/kafkaoutbox"
	"github.com/idemgo/idem/outbox"
)

// TestRelayToKafka relays 12 messages of 3 topics to a Kafka-protocol
// broker (kfake): each arrives once (no crash here), keyed by its topic,
// with its id, its headers and payload, each topic in the order stored;
// concurrently too, and to one Kafka topic for all (?topic=).
func TestRelayToKafka(t *testing.T) {
	addr := testAddr(t)
	for _, tc := range []struct {
		name  string
		conc  int
		fixed bool
	}{{"one_at_a_time", 1, false}, {"concurrency4", 4, false}, {"one_kafka_topic", 4, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := unique("idemtest.") + "."
			url := "kafka://" + addr + "/?topic_prefix=" + prefix
			ktopics := topicNames(prefix, 3)
			if tc.fixed {
				ktopics = []string{unique("idemtest.")}
				url = "kafka://" + addr + "/?topic=" + ktopics[0]
			}
			createTopics(t, addr, ktopics...)
			l := openLedger(t, t.TempDir())
			ids := putMessages(t, l, "notify", 3, 4)
			d, err := kafkaoutbox.FromURL(url)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := outbox.RelayOnce(ctx, l, d, outbox.WithConcurrency(tc.conc))
			if err != nil || res.Delivered != 12 {
				t.Fatalf("relay: %+v, %v; want 12 delivered", res, err)
			}
			got := readTopics(t, addr, 12, ktopics...)
			checkRecords(t, got, ids, true)
			for _, r := range got {
				want := prefix + r.topic
				if tc.fixed {
					want = ktopics[0]
				}
				if r.ktopic != want || r.key != r.topic || r.attempt != "1" || r.headers["Content-Type"] != "text/plain" ||
					!strings.HasSuffix(r.body, " "+r.topic) {
					t.Fatalf("record %s: Kafka topic %s (want %s), key %q, attempt %s, headers %v, body %q", r.id, r.ktopic, want, r.key,
						r.attempt, r.headers, r.body)
				}
			}
		})
	}
}

// checkRecords checks the records against the ids put, by topic: none
// lost, each topic's first copies in the order put, and, with once, no id
// twice.
func checkRecords(t *testing.T, got []received, ids map[string][]string, once bool) {
	t.Helper()
	count := map[string]int{}
	first := map[string][]string{}
	for _, r := range got {
		count[r.id]++
		if count[r.id] == 1 {
			first[r.topic] = append(first[r.topic], r.id)
		}
	}
	for topic, want := range ids {
		for _, id := range want {
			switch {
			case count[id] == 0:
				t.Errorf("message %s (topic %s) lost: no record", id, topic)
			case once && count[id] > 1:
				t.Errorf("message %s (topic %s) arrived %d times, want once", id, topic, count[id])
			}
		}
		if !slices.Equal(first[topic], want) {
			t.Errorf("topic %s: first arrivals %v, want the order %v", topic, first[topic], want)
		}
	}
}

// TestDeliverFailures: an outbox topic that makes no valid Kafka topic
// name parks at once (Permanent); a Kafka topic that does not exist fails
// the attempt (retried: the operator may create it).
func TestDeliverFailures(t *testing.T) {
	addr := testAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := kafkaoutbox.FromURL("kafka://" + addr + "/?topic_prefix=" + unique("nosuch."))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, topic := range []string{"a b", "a/b", "é", strings.Repeat("x", 250)} {
		err := d.Deliver(ctx, outbox.Delivery{ID: "x-0", Topic: topic})
		if err == nil || !idem.IsPermanent(err) {
			t.Errorf("topic %q: %v; want a permanent failure", topic, err)
		}
	}
	if err := d.Deliver(ctx, outbox.Delivery{ID: "x-1", Topic: "t"}); err == nil || idem.IsPermanent(err) {
		t.Errorf("a Kafka topic that does not exist: %v; want a failed attempt, not permanent", err)
	}
}

func TestFromURLErrors(t *testing.T) {
	for _, u := range []string{"nats://127.0.0.1:9092", "kafka://", "kafka://127.0.0.1:9092/path", "kafka://127.0.0.1:9092/?topc=x",
		"kafka://127.0.0.1/", "kafka://u:p@127.0.0.1:9092/", "%%"} {
		if d, err := kafkaoutbox.FromURL(u); err == nil {
			d.Close()
			t.Errorf("FromURL(%q): no error", u)
		}
	}
	d, err := kafkaoutbox.FromURL("kafka://127.0.0.1:9092,127.0.0.1:9093/?topic_prefix=p.")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.Topic("orders"); got != "p.orders" {
		t.Errorf("Topic(orders) = %q, want p.orders", got)
	}
}
