package rabbitoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/rabbitoutbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

func newPublisher(t testing.TB, url string, opts ...rabbitoutbox.Option) *rabbitoutbox.Publisher {
	t.Helper()
	p, err := rabbitoutbox.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPublishes: the relay publishes every message to the queue its topic
// names (the default exchange), persistent, with message-id the outbox id,
// the payload, the headers, idem-topic and idem-attempt, each topic in
// order; and marks each delivered.
func TestPublishes(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	a := newAdmin(t, url)
	topics := []string{unique("orders"), unique("mail")}
	for _, q := range topics {
		a.queue(q)
	}
	l := openLedger(t)
	var want [][]string // per topic, ids in order
	for range topics {
		want = append(want, nil)
	}
	for i := range 5 {
		var msgs []outbox.Message
		for ti, tp := range topics {
			m := msg(tp, fmt.Sprintf("%s #%d", tp, i))
			m.Headers = map[string]string{"Content-Type": "application/json", "X-Tenant": "t7"}
			msgs = append(msgs, m)
			_ = ti
		}
		ids := put(t, l, day(i+1), msgs...)
		for ti := range topics {
			want[ti] = append(want[ti], ids[ti])
		}
	}
	p := newPublisher(t, url)
	res, err := outbox.RelayOnce(context.Background(), l, p)
	if err != nil || res.Delivered != 10 {
		t.Fatalf("RelayOnce: %+v, %v; want 10 delivered", res, err)
	}
	for ti, tp := range topics {
		for i, id := range want[ti] {
			d := a.get(tp)
			if d.MessageId != id {
				t.Fatalf("queue %s message %d: message-id %q, want %q (in order)", tp, i, d.MessageId, id)
			}
			if string(d.Body) != fmt.Sprintf("%s #%d", tp, i) {
				t.Fatalf("message %s: body %q", id, d.Body)
			}
			if d.DeliveryMode != amqp.Persistent {
				t.Fatalf("message %s: delivery mode %d, want persistent (2)", id, d.DeliveryMode)
			}
			if d.ContentType != "application/json" || d.Headers["X-Tenant"] != "t7" || d.Headers["idem-topic"] != tp ||
				d.Headers["idem-attempt"] != int64(1) {
				t.Fatalf("message %s: content type %q, headers %v", id, d.ContentType, d.Headers)
			}
			if _, ok := d.Headers["Content-Type"]; ok {
				t.Fatalf("message %s: Content-Type is a header too: %v", id, d.Headers)
			}
		}
		a.empty(tp)
	}
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxDelivered {
			t.Fatalf("message %s: %s, want delivered", r.ID, r.Status)
		}
	}
}

// TestReturnedIsNotDelivered: a message that no queue takes (its topic
// names no queue) comes back from the broker; the attempt fails with
// ErrReturned and the message stays pending (retried after the backoff),
// its topic's next message not handed out. Once the queue exists, the
// retry delivers both, in order.
func TestReturnedIsNotDelivered(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	a := newAdmin(t, url)
	topic := unique("nobody")
	l := openLedger(t)
	ids := put(t, l, day(1), msg(topic, "first"), msg(topic, "second"))
	p := newPublisher(t, url)

	clock := idemtest.NewClock(time.Now())
	var mu sync.Mutex
	var results []outbox.DeliveryResult
	opts := []outbox.Option{outbox.WithClock(clock), outbox.OnDelivery(func(r outbox.DeliveryResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	})}
	res, err := outbox.RelayOnce(context.Background(), l, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 0 || res.Retrying != 1 || len(results) != 1 {
		t.Fatalf("RelayOnce over an unroutable topic: %+v (%d results); want 1 retrying, none delivered", res, len(results))
	}
	if r := results[0]; r.ID != ids[0] || r.Outcome != outbox.DeliveryRetrying || !errors.Is(r.Err, rabbitoutbox.ErrReturned) {
		t.Fatalf("the attempt: %s %s %v; want %s retrying with ErrReturned", r.ID, r.Outcome, r.Err, ids[0])
	}
	t.Logf("the returned attempt's error: %v", results[0].Err)
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{Topic: topic})
	if err != nil || len(recs) != 2 {
		t.Fatalf("ListOutbox: %d, %v", len(recs), err)
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxPending {
			t.Fatalf("message %s: %s after it was returned, want pending", r.ID, r.Status)
		}
	}

	// The queue appears; after the backoff the retry delivers both.
	a.queue(topic)
	clock.Advance(time.Hour)
	res, err = outbox.RelayOnce(context.Background(), l, p, opts...)
	if err != nil || res.Delivered != 2 {
		t.Fatalf("RelayOnce once the queue exists: %+v, %v; want 2 delivered", res, err)
	}
	for i, id := range ids {
		if d := a.get(topic); d.MessageId != id || d.Headers["idem-attempt"] != int64(2-i) {
			t.Fatalf("message %d: %q (attempt %v), want %q (attempt %d)", i, d.MessageId, d.Headers["idem-attempt"], id, 2-i)
		}
	}
	a.empty(topic)
}

// TestExchangeFromURL: FromURL's exchange parameter publishes to that
// exchange with the topic as routing key, and routing_key fixes the key.
func TestExchangeFromURL(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	a := newAdmin(t, url)
	ex := unique("events")
	if err := a.ch.ExchangeDeclare(ex, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.ch.ExchangeDelete(ex, false, false) })
	q, fixed := unique("q"), unique("q")
	a.queue(q)
	a.queue(fixed)
	if err := a.ch.QueueBind(q, "billing", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.ch.QueueBind(fixed, "all", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	l := openLedger(t)
	ids := put(t, l, day(1), msg("billing", "b1"))
	p, err := rabbitoutbox.FromURL(url + "?exchange=" + ex + "&heartbeat=5")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res, err := outbox.RelayOnce(context.Background(), l, p); err != nil || res.Delivered != 1 {
		t.Fatalf("RelayOnce: %+v, %v", res, err)
	}
	if d := a.get(q); d.MessageId != ids[0] || d.Exchange != ex || d.RoutingKey != "billing" {
		t.Fatalf("got %q from exchange %q key %q", d.MessageId, d.Exchange, d.RoutingKey)
	}

	ids = put(t, l, day(2), msg("anything", "a1"))
	p2, err := rabbitoutbox.FromURL(url + "?exchange=" + ex + "&routing_key=all")
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if res, err := outbox.RelayOnce(context.Background(), l, p2); err != nil || res.Delivered != 1 {
		t.Fatalf("RelayOnce with routing_key: %+v, %v", res, err)
	}
	if d := a.get(fixed); d.MessageId != ids[0] || d.RoutingKey != "all" {
		t.Fatalf("got %q with key %q", d.MessageId, d.RoutingKey)
	}
}

// TestMissingExchange: an exchange that does not exist closes the channel
// (404); the attempt fails, the message stays pending, and the publisher
// goes on with a new channel.
func TestMissingExchange(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	a := newAdmin(t, url)
	topic := unique("t")
	a.queue(topic)
	l := openLedger(t)
	put(t, l, day(1), msg(topic, "x"))
	bad := newPublisher(t, url, rabbitoutbox.WithExchange(unique("missing")))
	var last error
	res, err := outbox.RelayOnce(context.Background(), l, bad, outbox.WithClock(idemtest.NewClock(time.Now())),
		outbox.OnDelivery(func(r outbox.DeliveryResult) { last = r.Err }))
	if err != nil || res.Delivered != 0 || res.Retrying != 1 {
		t.Fatalf("RelayOnce to a missing exchange: %+v, %v; want 1 retrying", res, err)
	}
	if last == nil || !strings.Contains(last.Error(), "NOT_FOUND") {
		t.Fatalf("the attempt's error: %v; want the broker's NOT_FOUND", last)
	}
	t.Logf("the attempt's error: %v", last)
	// The same publisher's next delivery opens a new channel.
	d := outbox.Delivery{ID: "direct-1", Topic: topic, Payload: []byte("y"), Attempt: 1}
	if err := bad.Deliver(context.Background(), d); err == nil {
		t.Fatal("a second publish to the missing exchange succeeded")
	}
	good := newPublisher(t, url)
	if err := good.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got := a.get(topic); got.MessageId != "direct-1" {
		t.Fatalf("got %q", got.MessageId)
	}
}

// TestConcurrentTopics: with outbox.WithConcurrency(4) the publisher has
// several publishes in flight on channels of one connection; every topic
// arrives whole and in order.
func TestConcurrentTopics(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	a := newAdmin(t, url)
	var topics []string
	for range 6 {
		tp := unique("c")
		a.queue(tp)
		topics = append(topics, tp)
	}
	l := openLedger(t)
	want := map[string][]string{}
	for i := range 20 {
		var msgs []outbox.Message
		for _, tp := range topics {
			msgs = append(msgs, msg(tp, fmt.Sprint(i)))
		}
		for j, id := range put(t, l, day(1)+fmt.Sprint(i), msgs...) {
			want[topics[j]] = append(want[topics[j]], id)
		}
	}
	p := newPublisher(t, url)
	res, err := outbox.RelayOnce(context.Background(), l, p, outbox.WithConcurrency(4))
	if err != nil || res.Delivered != 120 {
		t.Fatalf("RelayOnce: %+v, %v", res, err)
	}
	for _, tp := range topics {
		for i, id := range want[tp] {
			if d := a.get(tp); d.MessageId != id {
				t.Fatalf("topic %s message %d: %q, want %q", tp, i, d.MessageId, id)
			}
		}
		a.empty(tp)
	}
}

// TestFromURLErrors: FromURL refuses what it cannot use, and its errors
// do not show the password.
func TestFromURLErrors(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"http://user:s3cret@host/",
		"amqp://user:s3cret@host/?exchnage=events",
		"amqp://user:s3cret@host/?exchange=a&exchange=b",
		"amqp://user:s3cret@host/?routing_key=",
		"amqp://user:s3cret@host:port/",
	} {
		_, err := rabbitoutbox.FromURL(u)
		if err == nil {
			t.Errorf("FromURL(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("FromURL(%q): %v shows the password", u, err)
		}
	}
	p, err := rabbitoutbox.FromURL("amqp://user:s3cret@host:5673/prod?exchange=events")
	if err != nil {
		t.Fatal(err)
	}
	if s := p.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "events") {
		t.Errorf("String() = %q", s)
	}
}

// TestDeliverAfterClose: a closed publisher refuses.
func TestDeliverAfterClose(t *testing.T) {
	t.Parallel()
	p, err := rabbitoutbox.New("amqp://guest:guest@127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	if err := p.Deliver(context.Background(), outbox.Delivery{ID: "x", Topic: "t"}); !errors.Is(err, rabbitoutbox.ErrClosed) {
		t.Fatalf("Deliver after Close: %v", err)
	}
	var _ idem.Key // the package is used by the other tests
}
