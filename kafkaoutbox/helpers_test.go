package kafkaoutbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const addrEnv = "IDEM_TEST_KAFKA_ADDR"

func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// testAddr returns the test broker's addresses (scripts/kafka.sh: kfake,
// a Kafka-protocol broker, not Apache Kafka). Without them the test is
// skipped, except in CI, where the Kafka tests must run.
func testAddr(t testing.TB) string {
	t.Helper()
	a := os.Getenv(addrEnv)
	if a == "" {
		if inCI() {
			t.Fatalf("%s is not set, and CI must run the Kafka tests: run scripts/test.sh (it starts a broker with scripts/kafka.sh)", addrEnv)
		}
		t.Skipf("no Kafka broker: run scripts/test.sh (it starts kfake with scripts/kafka.sh), or set %s=host:port[,host:port]", addrEnv)
	}
	return a
}

// unique is a name no other test (or run) uses.
func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func client(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(addr, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopics creates the Kafka topics names, 4 partitions each.
func createTopics(t testing.TB, addr string, names ...string) {
	t.Helper()
	cl := client(t, addr)
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, n := range names {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = n, 4, 3
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("create topics %v: %v", names, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create topic %s: %v", rt.Topic, err)
		}
	}
}

// received is a record as a consumer gets it.
type received struct {
	id, topic, key, attempt, body, ktopic string
	headers                               map[string]string
}

// readTopics consumes the Kafka topics from their start until it has at
// least n records and the topics stay quiet for a moment (a duplicate may
// follow), Limit at most.
func readTopics(t testing.TB, addr string, n int, topics ...string) []received {
	t.Helper()
	cl := client(t, addr, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	deadline := time.Now().Add(testwait.Limit(t))
	var got []received
	quiet := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		before := len(got)
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			got = append(got, received{id: h["Idem-Message-Id"], topic: h["Idem-Topic"], key: string(r.Key), attempt: h["Idem-Attempt"],
				body: string(r.Value), ktopic: r.Topic, headers: h})
		})
		if len(got) == before {
			quiet++
		} else {
			quiet = 0
		}
		if len(got) >= n && quiet >= 3 {
			return got
		}
	}
	t.Fatalf("gave up after %s waiting for %d records of %v: got %d", testwait.Limit(t), n, topics, len(got))
	return nil
}

// putMessages queues per messages on each of topics topics (t0, t1, ...)
// in s, one transaction per round, and returns their ids by topic in the
// order stored.
func putMessages(t testing.TB, s *idem.Ledger, job string, topics, per int) map[string][]string {
	t.Helper()
	ids := map[string][]string{}
	for i := range per {
		key := idem.Key{Job: job, Period: fmt.Sprintf("2026-11-%02d", i+1)}
		err := s.RunTx(context.Background(), key, func(ctx context.Context, tx *sql.Tx) error {
			for tp := range topics {
				topic := fmt.Sprintf("t%d", tp)
				id, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic, Payload: []byte(key.Period + " " + topic),
					Headers: map[string]string{"Content-Type": "text/plain"}})
				if err != nil {
					return err
				}
				ids[topic] = append(ids[topic], id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func openLedger(t testing.TB, dir string) *idem.Ledger {
	t.Helper()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// topicNames are the Kafka topics of prefix for the outbox topics t0..t(n-1).
func topicNames(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%st%d", prefix, i))
	}
	return out
}
