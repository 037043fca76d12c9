//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerEnv is the test broker's address in the environment variable
// name (scripts/test.sh starts them: scripts/nats.sh, scripts/kafka.sh);
// without it the test is skipped, except in CI.
func brokerEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("%s is not set, and CI must run the broker tests: run scripts/test.sh", name)
		}
		t.Skipf("no broker: set %s (scripts/test.sh starts one)", name)
	}
	return v
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// relayToBroker runs 'idem outbox relay --to url' until every message of
// ids is delivered, then stops it with SIGTERM (exit 0).
func relayToBroker(t *testing.T, e *env, url string, ids []string) {
	t.Helper()
	relay, stderr := e.relay("--to", url, "--poll", "10ms", "--concurrency", "2")
	testwait.Until(t, func() bool {
		m := e.outboxLs()
		for _, id := range ids {
			if m[id].Status != "delivered" {
				return false
			}
		}
		return true
	}, "idem outbox relay --to %s to deliver %v", url, ids)
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(relay, stderr); err != nil {
		t.Fatalf("relay after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// TestOutboxRelayToNATS: 'idem outbox relay --to nats://…' publishes each
// message to the JetStream stream, on PREFIX+topic, with Nats-Msg-Id its
// id, each topic in order.
func TestOutboxRelayToNATS(t *testing.T) {
	t.Parallel()
	server := brokerEnv(t, "IDEM_TEST_NATS_URL")
	nc, err := nats.Connect(server)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	prefix, name := uniqueName("idemcli.")+".", strings.ToUpper(uniqueName("IDEMCLI_"))
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), name) }()

	e := newEnv(t, "")
	ids := e.sqlitePut() // payments, poison, payments
	relayToBroker(t, e, server+"/?stream="+name+"&subject_prefix="+prefix, ids)

	var got []string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d of the stream: %v", seq, err)
		}
		got = append(got, strings.TrimPrefix(m.Subject, prefix)+" "+m.Header.Get(jetstream.MsgIDHeader))
	}
	if _, err := stream.GetMsg(ctx, 4); err == nil {
		t.Error("the stream has a 4th message; want 3")
	}
	checkBrokerOrder(t, got, ids)
}

// checkBrokerOrder: got ("topic id", in the broker's order) has each of
// ids once, and the payments topic in order.
func checkBrokerOrder(t *testing.T, got, ids []string) {
	t.Helper()
	var payments []string
	for _, g := range got {
		if id, ok := strings.CutPrefix(g, "payments "); ok {
			payments = append(payments, id)
		}
	}
	if !slices.Equal(payments, []string{ids[0], ids[2]}) || !slices.Contains(got, "poison "+ids[1]) || len(got) != 3 {
		t.Fatalf("the broker has %v; want payments %v in order and poison %s, each once", got, []string{ids[0], ids[2]}, ids[1])
	}
}

// TestOutboxRelayToKafka: 'idem outbox relay --to kafka://…' produces each
// message to PREFIX+topic, keyed by its topic, with Idem-Message-Id its
// id, each topic in order. The broker is kfake (scripts/kafka.sh), a
// Kafka-protocol broker, not Apache Kafka.
func TestOutboxRelayToKafka(t *testing.T) {
	t.Parallel()
	addr := brokerEnv(t, "IDEM_TEST_KAFKA_ADDR")
	prefix := uniqueName("idemcli.") + "."
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	topics := []string{prefix + "payments", prefix + "poison"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, name := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 2, 1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create topic %s: %v", rt.Topic, err)
		}
	}

	e := newEnv(t, "")
	ids := e.sqlitePut() // payments, poison, payments
	relayToBroker(t, e, "kafka://"+addr+"/?topic_prefix="+prefix, ids)

	var got []string
	for len(got) < 3 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			id := ""
			for _, h := range r.Headers {
				if h.Key == "Idem-Message-Id" {
					id = string(h.Value)
				}
			}
			got = append(got, strings.TrimPrefix(r.Topic, prefix)+" "+id)
			if string(r.Key) != strings.TrimPrefix(r.Topic, prefix) {
				t.Errorf("record %s: key %q, want its topic", id, r.Key)
			}
		})
	}
	checkBrokerOrder(t, got, ids)
}

// TestOutboxRelayToUsage: --to with a scheme no deliverer takes, a URL its
// deliverer refuses, a broker that is not there, or with --webhook too,
// is exit 2, saying why.
func TestOutboxRelayToUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.sqlitePut()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "ftp://127.0.0.1/"}, "want a URL of"},
		{[]string{"--to", "nats://127.0.0.1:4222/?streem=S"}, "unknown parameter"},
		{[]string{"--to", "kafka://127.0.0.1:9092/?topc=x"}, "unknown parameter"},
		{[]string{"--to", "nats://127.0.0.1:1/"}, "connect"},
		{[]string{"--to", "nats://127.0.0.1:1/", "--webhook", "http://127.0.0.1:1/"}, "give one"},
		{nil, "--webhook URL or --to URL is required"},
	} {
		_, stderr := e.want(exitUsage, append([]string{"outbox", "relay", "--ledger", e.ledger}, tc.args...)...)
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("idem outbox relay %v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
}
