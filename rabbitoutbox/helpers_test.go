package rabbitoutbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The tests run against a real RabbitMQ broker named by this variable;
// scripts/test.sh starts a throwaway one (scripts/rabbitmq.sh) and sets it.
const urlEnv = "IDEM_TEST_AMQP_URL"

// testURL returns the test broker's URL. Without one the test is skipped,
// except in CI, where the RabbitMQ tests must run.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		if inCI() {
			t.Fatalf("%s is not set, and CI must run the RabbitMQ tests: run scripts/test.sh (it starts rabbitmq-server with scripts/rabbitmq.sh)", urlEnv)
		}
		t.Skipf("no RabbitMQ: run scripts/test.sh (it starts a throwaway broker), or eval \"$(scripts/rabbitmq.sh start)\", or set %s=amqp://...", urlEnv)
	}
	return u
}

func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// admin is a connection for a test's topology and its consumers.
type admin struct {
	t    testing.TB
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(t testing.TB, url string) *admin {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to the test broker: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &admin{t: t, conn: conn, ch: ch}
}

// queue declares a durable queue, deleted when the test ends.
func (a *admin) queue(name string) {
	a.t.Helper()
	if _, err := a.ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		a.t.Fatalf("declare queue %s: %v", name, err)
	}
	a.t.Cleanup(func() { _, _ = a.ch.QueueDelete(name, false, false, false) })
}

// get takes the next message of queue, waiting up to 10 s for it.
func (a *admin) get(queue string) amqp.Delivery {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, ok, err := a.ch.Get(queue, true)
		if err != nil {
			a.t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("gave up after 10 s waiting for a message in queue %s", queue)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// empty fails the test unless queue holds no message.
func (a *admin) empty(queue string) {
	a.t.Helper()
	q, err := a.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	if q.Messages != 0 {
		a.t.Fatalf("queue %s holds %d messages, want none", queue, q.Messages)
	}
}

// openLedger opens a SQLite ledger in a temporary directory, closed when
// the test ends.
func openLedger(t testing.TB) *idem.Ledger {
	t.Helper()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// put queues the messages msgs in one transaction of key day.
func put(t testing.TB, l *idem.Ledger, day string, msgs ...outbox.Message) []string {
	t.Helper()
	var ids []string
	err := l.RunTx(context.Background(), idem.Key{Job: "notify", Period: day}, func(ctx context.Context, tx *sql.Tx) error {
		for _, m := range msgs {
			id, err := outbox.Put(ctx, tx, m)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func msg(topic, body string) outbox.Message {
	return outbox.Message{Topic: topic, Payload: []byte(body)}
}

func day(i int) string { return fmt.Sprintf("2026-12-%02d", i) }
