//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpURL is the test RabbitMQ broker's URL ($IDEM_TEST_AMQP_URL:
// scripts/test.sh starts one with scripts/rabbitmq.sh); without it the
// test is skipped, except in CI.
func amqpURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("IDEM_TEST_AMQP_URL")
	if u == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatal("IDEM_TEST_AMQP_URL is not set, and CI must run the RabbitMQ tests: run scripts/test.sh")
		}
		t.Skip("no RabbitMQ: set IDEM_TEST_AMQP_URL (eval \"$(scripts/rabbitmq.sh start)\" from the repository's root)")
	}
	return u
}

// TestOutboxRelayToAMQP: 'idem outbox relay --to amqp://…?exchange=…'
// publishes a topic's messages to the exchange, in order, with message-id
// the outbox id, and marks them delivered; a message that no queue takes
// comes back and stays pending (logged as a failed attempt); SIGTERM stops
// the relay with exit 0. A bad --to is a usage error that does not show the
// password.
func TestOutboxRelayToAMQP(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	exchange, topic, nowhere := "idem-cli-"+suffix, "orders-"+suffix, "nowhere-"+suffix

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(topic, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(topic, topic, exchange, false, nil); err != nil {
		t.Fatal(err)
	}

	e := newEnv(t, "")
	l, err := idem.OpenLedger(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, day := range []string{"2026-12-01", "2026-12-02"} {
		err := l.RunTx(context.Background(), idem.Key{Job: "ship", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
			for _, tp := range []string{topic, nowhere, topic} {
				id, err := outbox.Put(ctx, tx, outbox.Message{Topic: tp, Payload: []byte(day)})
				if err != nil {
					return err
				}
				if tp == topic {
					ids = append(ids, id)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Close()

	relay, stderr := e.relay("--to", url+"?exchange="+exchange, "--poll", "10ms", "-v")
	testwait.Until(t, func() bool {
		m := e.outboxLs()
		for _, id := range ids {
			if m[id].Status != "delivered" {
				return false
			}
		}
		return true
	}, "the relay to deliver the 4 messages of topic %s", topic)
	for i, id := range ids {
		var d amqp.Delivery
		testwait.Until(t, func() bool {
			var ok bool
			d, ok, err = ch.Get(topic, true)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}, "message %d in queue %s", i, topic)
		if d.MessageId != id || d.DeliveryMode != amqp.Persistent || d.Exchange != exchange {
			t.Fatalf("message %d: id %q mode %d exchange %q; want %q, persistent, %q", i, d.MessageId, d.DeliveryMode, d.Exchange, id, exchange)
		}
	}
	testwait.Until(t, func() bool {
		for _, m := range e.outboxLs() {
			if m.Topic == nowhere && m.Status == "pending" && strings.Contains(m.LastError, "NO_ROUTE") {
				return true
			}
		}
		return false
	}, "the first message of topic %s, which no queue takes, to have failed an attempt with NO_ROUTE", nowhere)
	for id, m := range e.outboxLs() {
		if m.Topic == nowhere && m.Status != "pending" {
			t.Fatalf("message %s of topic %s, which no queue takes: %s, want pending", id, nowhere, m.Status)
		}
	}
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(relay, stderr); err != nil {
		t.Fatalf("relay after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "relaying the outbox of") || strings.Contains(stderr.String(), passwordOf(url)) {
		t.Fatalf("the relay's log does not say where it relays, or shows the password:\n%s", stderr.String())
	}

	_, errOut := e.want(exitUsage, "outbox", "relay", "--ledger", e.ledger, "--to", "amqp://u:s3cret@127.0.0.1:1/?exchnage=x")
	if !strings.Contains(errOut, "exchnage") || strings.Contains(errOut, "s3cret") {
		t.Fatalf("a misspelt parameter: %q", errOut)
	}
	e.want(exitUsage, "outbox", "relay", "--ledger", e.ledger, "--to", "nats://127.0.0.1:1", "--webhook", "http://127.0.0.1:1/")
}

// passwordOf is the password of a URL (amqp://user:pass@…), or a string no
// log contains.
func passwordOf(raw string) string {
	_, rest, _ := strings.Cut(raw, "://")
	userinfo, _, ok := strings.Cut(rest, "@")
	if !ok {
		return "\x00"
	}
	_, pass, ok := strings.Cut(userinfo, ":")
	if !ok || pass == "" {
		return "\x00"
	}
	return pass
}
