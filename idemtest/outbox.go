package idemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
)

// outboxLedger is a store with an outbox in the database of its
// transactions of type Tx: what [TestOutbox] checks, behind the store it is
// given. idem.Ledger is one with *sql.Tx, the Postgres ledger with pgx.Tx.
type outboxLedger[Tx any] interface {
	idemstore.TxStore[Tx]
	idemstore.OutboxTxStore[Tx]
	idemstore.OutboxStore
}

// OutboxHarness opens stores for [TestOutbox].
type OutboxHarness[Tx any] struct {
	// Open returns a new, empty store; each subtest opens one.
	Open func(t *testing.T) idem.TxStore[Tx]

	// Shift makes d pass for a store that keeps its outbox's leases and
	// backoff deadlines on its own clock (a database's now()), e.g. by
	// moving every such time it stored back by d. The suite calls it
	// whenever it advances the fake clock it gives relays; leave it nil for
	// stores that use the times they are given (the relay's clock), as
	// idem's SQLite ledger does.
	Shift func(t *testing.T, s idem.Store, d time.Duration)
}

// TestOutbox runs the outbox's conformance suite against the stores
// h.Open returns: outbox.Put in RunTx, EachTx (when the store is an
// idemstore.ItemTxStore) and CatchUpTx (when it is an
// idemstore.CatchUpTxStore); stable ids across a rolled-back attempt; no
// message of a rolled-back transaction ever listed or delivered; per-topic
// order through failures; backoff through a receiver down for an hour (on
// a fake clock); poison messages parked without blocking other topics;
// fencing of a relay whose lease ran out; retry, drop, prune and stats;
// concurrent relays that deliver no message twice; a relay with
// outbox.WithConcurrency that keeps its bound on deliveries in flight, has
// more than one in flight, and keeps every topic's order through a slow,
// flaky receiver; and relays stopped
// during a delivery to a real HTTP receiver, whose messages claimed and
// never posted are given back without an attempt (which needs an
// idemstore.OutboxReleaser) and never park.
//
// The store behind each ([idemstore.Of]) must be an idemstore.TxStore, an
// idemstore.OutboxTxStore of Tx and an idemstore.OutboxStore.
func TestOutbox[Tx any](t *testing.T, h OutboxHarness[Tx]) {
	open := func(t *testing.T) (outboxLedger[Tx], *Clock) {
		st, err := idemstore.Of(h.Open(t))
		if err != nil {
			t.Fatalf("idemtest: TestOutbox: %v", err)
		}
		ol, ok := st.(outboxLedger[Tx])
		if !ok {
			t.Fatalf("idemtest: TestOutbox: the store %T has no outbox in its transactions (idemstore.TxStore, OutboxTxStore and OutboxStore of %T)", st, reflect.TypeFor[Tx]())
		}
		clk := NewClock(outboxT0)
		if h.Shift != nil {
			clk.mu.Lock()
			clk.onMove = func(d time.Duration) { h.Shift(t, st, d) }
			clk.mu.Unlock()
		}
		return ol, clk
	}
	for _, c := range []struct {
		name string
		test func(*testing.T, outboxLedger[Tx], *Clock)
	}{
		{"PutAndDeliver", testOutboxPut[Tx]},
		{"RolledBackAttempt", testOutboxRollback[Tx]},
		{"TopicOrder", testOutboxOrder[Tx]},
		{"ReceiverDownAnHour", testOutboxDown[Tx]},
		{"Poison", testOutboxPoison[Tx]},
		{"Fencing", testOutboxFencing[Tx]},
		{"PruneAndStats", testOutboxPrune[Tx]},
		{"ConcurrentRelays", testOutboxRelays[Tx]},
		{"EachTx", testOutboxEach[Tx]},
		{"CatchUpTx", testOutboxCatchUp[Tx]},
		{"RelayStopped", testOutboxRelayStopped[Tx]},
		{"ConcurrentTopics", testOutboxConcurrentTopics[Tx]},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clk := open(t)
			c.test(t, s, clk)
		})
	}
}

var outboxT0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

// receiver is the suite's deliverer: it records every delivery attempt
// in order, and fails the ones fail says.
type receiver struct {
	mu   sync.Mutex
	log  []outbox.Delivery // every attempt handed to it
	ok   []outbox.Delivery // the accepted ones
	fail func(d outbox.Delivery) error
}

func (r *receiver) Deliver(_ context.Context, d outbox.Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, d)
	if r.fail != nil {
		if err := r.fail(d); err != nil {
			return err
		}
	}
	r.ok = append(r.ok, d)
	return nil
}

func (r *receiver) accepted() []outbox.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ok)
}

func (r *receiver) ids() []string {
	var ids []string
	for _, d := range r.accepted() {
		ids = append(ids, d.ID)
	}
	return ids
}

// putTx runs a RunTx of key on s that puts msgs, then returns fnErr.
func putTx[Tx any](ctx context.Context, s outboxLedger[Tx], key idem.Key, fnErr error, msgs []outbox.Message, opts ...idem.Option) ([]string, error) {
	var ids []string
	err := idem.RunTx(ctx, idem.TxStoreOf[Tx](s), key, func(ctx context.Context, tx Tx) error {
		ids = ids[:0]
		for _, m := range msgs {
			id, err := outbox.Put(ctx, tx, m)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return fnErr
	}, opts...)
	return ids, err
}

func msg(topic string, n int) outbox.Message {
	return outbox.Message{Topic: topic, Payload: []byte(topic + "#" + strconv.Itoa(n))}
}

func list(t *testing.T, s idemstore.OutboxStore, f idemstore.OutboxFilter) []idemstore.OutboxRecord {
	t.Helper()
	recs, err := s.ListOutbox(context.Background(), f)
	if err != nil {
		t.Fatalf("ListOutbox(%+v): %v", f, err)
	}
	return recs
}

func relayOnce(t *testing.T, s idem.Store, d outbox.Deliverer, opts ...outbox.Option) outbox.Result {
	t.Helper()
	res, err := outbox.RelayOnce(context.Background(), s, d, opts...)
	if err != nil {
		t.Fatalf("RelayOnce: %v (%+v)", err, res)
	}
	return res
}

func testOutboxPut[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	key := idem.Key{Job: "settle", Period: "2026-11-02"}
	msgs := []outbox.Message{
		{Topic: "payments", Payload: []byte(`{"amount":5}`), Headers: map[string]string{"Content-Type": "application/json", "X-Tenant": "a"}},
		{Topic: "payments", Payload: nil},
		{Topic: "mail", Payload: []byte("hello")},
	}
	ids, err := putTx(ctx, s, key, nil, msgs, idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{key.RequestID() + "-0", key.RequestID() + "-1", key.RequestID() + "-2"}
	if !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	recs := list(t, s, idemstore.OutboxFilter{})
	if len(recs) != 3 {
		t.Fatalf("listed %d messages, want 3: %+v", len(recs), recs)
	}
	for i, r := range recs {
		if r.ID != want[i] || r.Status != idemstore.OutboxPending || r.Key != key || r.Topic != msgs[i].Topic ||
			string(r.Payload) != string(msgs[i].Payload) || len(r.Headers) != len(msgs[i].Headers) || !r.Created.Equal(outboxT0) {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	if got := list(t, s, idemstore.OutboxFilter{Topic: "mail"}); len(got) != 1 || got[0].ID != want[2] {
		t.Fatalf("topic filter: %+v", got)
	}
	if got := list(t, s, idemstore.OutboxFilter{ID: want[1]}); len(got) != 1 || got[0].ID != want[1] {
		t.Fatalf("id filter: %+v", got)
	}
	// A second run of the done key queues nothing more.
	if _, err := putTx(ctx, s, key, nil, msgs, idem.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	var r receiver
	var results []outbox.DeliveryResult
	res := relayOnce(t, s, &r, outbox.WithClock(clk), outbox.OnDelivery(func(dr outbox.DeliveryResult) { results = append(results, dr) }))
	if res.Delivered != 3 || res.Claimed != 3 || len(results) != 3 {
		t.Fatalf("relay result %+v, %d results; want 3 delivered", res, len(results))
	}
	got := map[string]outbox.Delivery{}
	for i, d := range r.accepted() {
		got[d.ID] = d
		if results[i].Outcome != outbox.DeliverySent || results[i].ID != d.ID {
			t.Fatalf("result %d: %+v", i, results[i])
		}
	}
	for i, id := range want {
		d := got[id]
		if d.ID != id || d.Topic != msgs[i].Topic || string(d.Payload) != string(msgs[i].Payload) || d.Attempt != 1 || d.Key != key {
			t.Fatalf("delivery of message %d: %+v", i, d)
		}
	}
	if h := got[want[0]].Headers; h["X-Tenant"] != "a" || h["Content-Type"] != "application/json" {
		t.Fatalf("headers %v", h)
	}
	for _, rec := range list(t, s, idemstore.OutboxFilter{}) {
		if rec.Status != idemstore.OutboxDelivered || !rec.Delivered.Equal(outboxT0) {
			t.Fatalf("after the relay: %+v", rec)
		}
	}
	if res := relayOnce(t, s, &r, outbox.WithClock(clk)); res.Claimed != 0 {
		t.Fatalf("a second pass claimed %+v", res)
	}
	// Put with another transaction type, or outside a body.
	err = idem.RunTx(ctx, idem.TxStoreOf[Tx](s), idem.Key{Job: "settle", Period: "other"}, func(ctx context.Context, tx Tx) error {
		_, err := outbox.Put(ctx, "not a tx", outbox.Message{Topic: "x"})
		return idem.Permanent(err)
	}, idem.WithClock(clk))
	if !errors.Is(err, outbox.ErrNoOutbox) {
		t.Fatalf("Put with another tx: %v, want ErrNoOutbox", err)
	}
	if _, err := outbox.Put(ctx, 0, outbox.Message{Topic: "x"}); !errors.Is(err, outbox.ErrNoOutbox) {
		t.Fatalf("Put outside a body: %v, want ErrNoOutbox", err)
	}
	err = idem.RunTx(ctx, idem.TxStoreOf[Tx](s), idem.Key{Job: "settle", Period: "bad"}, func(ctx context.Context, tx Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: ""})
		return idem.Permanent(err)
	}, idem.WithClock(clk))
	if !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("Put of an empty topic: %v, want ErrInvalidMessage", err)
	}
	if n := len(list(t, s, idemstore.OutboxFilter{})); n != 3 {
		t.Fatalf("%d messages after refused Puts, want 3", n)
	}
}

func testOutboxRollback[Tx any](t *testing.T, s outboxLedger[Tx], _ *Clock) {
	ctx := context.Background()
	clk := NewAutoClock(outboxT0)
	key := idem.Key{Job: "grant", Period: "2026-11-02"}
	msgs := []outbox.Message{msg("points", 0), msg("points", 1)}
	boom := errors.New("boom after the Puts")
	if _, err := putTx(ctx, s, key, boom, msgs, idem.WithClock(clk), idem.OneAttempt()); !errors.Is(err, boom) {
		t.Fatalf("failing attempt: %v, want boom", err)
	}
	if recs := list(t, s, idemstore.OutboxFilter{}); len(recs) != 0 {
		t.Fatalf("a rolled-back attempt left messages: %+v", recs)
	}
	var r receiver
	if res := relayOnce(t, s, &r, outbox.WithClock(clk)); res.Claimed != 0 {
		t.Fatalf("relay after a rollback: %+v", res)
	}
	// In-process retries: fails twice, then commits.
	fails := 2
	var ids []string
	err := idem.RunTx(ctx, idem.TxStoreOf[Tx](s), key, func(ctx context.Context, tx Tx) error {
		ids = ids[:0]
		for _, m := range msgs {
			id, err := outbox.Put(ctx, tx, m)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if fails > 0 {
			fails--
			return boom
		}
		return nil
	}, idem.WithClock(clk), idem.WithBackoff(idem.Constant(time.Second)), idem.WaitForTurn())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{key.RequestID() + "-0", key.RequestID() + "-1"}
	if !slices.Equal(ids, want) {
		t.Fatalf("ids after retries %v, want %v", ids, want)
	}
	recs := list(t, s, idemstore.OutboxFilter{})
	if len(recs) != 2 || recs[0].ID != want[0] || recs[1].ID != want[1] {
		t.Fatalf("after the retried attempt: %+v", recs)
	}
	relayOnce(t, s, &r, outbox.WithClock(clk))
	if got := r.ids(); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// checkOrder fails unless, per topic, the accepted deliveries come in
// the order of the messages' Seq, and no attempt of a message came before
// the acceptance of every earlier message of its topic that was not
// parked.
func checkOrder(t *testing.T, s idemstore.OutboxStore, log []outbox.Delivery) {
	t.Helper()
	recs := list(t, s, idemstore.OutboxFilter{})
	seq := map[string]idemstore.OutboxRecord{}
	for _, r := range recs {
		seq[r.ID] = r
	}
	settled := map[string]bool{}
	for _, r := range recs {
		if r.Status == idemstore.OutboxParked {
			settled[r.ID] = true
		}
	}
	for i, d := range log {
		me := seq[d.ID]
		for _, r := range recs {
			if r.Topic == me.Topic && r.Seq < me.Seq && !settled[r.ID] {
				t.Fatalf("attempt %d: %s (topic %s) handed out before %s was delivered", i, d.ID, d.Topic, r.ID)
			}
		}
		// Accepted now? (the log holds attempts; an accepted one is the
		// last attempt of its id)
		last := true
		for _, e := range log[i+1:] {
			if e.ID == d.ID {
				last = false
			}
		}
		if last && me.Status == idemstore.OutboxDelivered {
			settled[d.ID] = true
		}
	}
}

func testOutboxOrder[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	// Five transactions, each two messages of topic a and one of b.
	for p := range 5 {
		key := idem.Key{Job: "order", Period: fmt.Sprintf("p%d", p)}
		if _, err := putTx(ctx, s, key, nil, []outbox.Message{msg("a", 2*p), msg("b", p), msg("a", 2*p+1)}, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
	}
	// a's messages fail twice each; b's never.
	tries := map[string]int{}
	r := receiver{fail: func(d outbox.Delivery) error {
		tries[d.ID]++
		if d.Topic == "a" && tries[d.ID] <= 2 {
			return errors.New("a is flaky")
		}
		return nil
	}}
	opts := []outbox.Option{outbox.WithClock(clk), outbox.WithBackoff(idem.Constant(time.Second)), outbox.WithBatch(4)}
	for round := 0; round < 100 && len(r.accepted()) < 15; round++ {
		relayOnce(t, s, &r, opts...)
		clk.Advance(time.Second)
	}
	if n := len(r.accepted()); n != 15 {
		t.Fatalf("%d of 15 delivered", n)
	}
	checkOrder(t, s, r.log)
	var a, b []string
	for _, d := range r.accepted() {
		if d.Topic == "a" {
			a = append(a, string(d.Payload))
		} else {
			b = append(b, string(d.Payload))
		}
	}
	for i := range a {
		if a[i] != "a#"+strconv.Itoa(i) {
			t.Fatalf("topic a delivered in the order %v", a)
		}
	}
	for i := range b {
		if b[i] != "b#"+strconv.Itoa(i) {
			t.Fatalf("topic b delivered in the order %v", b)
		}
	}
	// b did not wait for a: all of b was delivered before the last of a.
	lastA, lastB := -1, -1
	for i, d := range r.accepted() {
		if d.Topic == "a" {
			lastA = i
		} else {
			lastB = i
		}
	}
	if lastB > lastA {
		t.Fatalf("topic b waited for a's retries: %v", r.ids())
	}
}

func testOutboxDown[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	for p := range 3 {
		key := idem.Key{Job: "notify", Period: fmt.Sprintf("p%d", p)}
		if _, err := putTx(ctx, s, key, nil, []outbox.Message{msg("n"+strconv.Itoa(p), 0), msg("n"+strconv.Itoa(p), 1)}, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
	}
	back := outboxT0.Add(time.Hour)
	var mu sync.Mutex
	r := receiver{fail: func(outbox.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if clk.Now().Before(back) {
			return errors.New("connection refused")
		}
		return nil
	}}
	b := idem.MaxAttempts(50, idem.Capped(10*time.Minute, idem.Exponential(time.Second)))
	opts := []outbox.Option{outbox.WithClock(clk), outbox.WithBackoff(b)}
	// The relay passes every 30 seconds for two hours of fake time.
	var attempts []time.Time
	for clk.Now().Before(outboxT0.Add(2 * time.Hour)) {
		res := relayOnce(t, s, &r, opts...)
		if res.Claimed > 0 && clk.Now().Before(back) {
			attempts = append(attempts, clk.Now())
		}
		if res.Parked > 0 {
			t.Fatalf("a message parked while the receiver was down: %+v", res)
		}
		clk.Advance(30 * time.Second)
	}
	if got := len(r.accepted()); got != 6 {
		t.Fatalf("%d of 6 messages arrived after the receiver returned", got)
	}
	// Backoff: while down, the attempts thinned out (far fewer than one
	// per pass: 120 passes in the hour).
	if len(attempts) >= 40 {
		t.Fatalf("%d passes handed out messages while the receiver was down: no backoff", len(attempts))
	}
	for _, rec := range list(t, s, idemstore.OutboxFilter{}) {
		first := strings.HasSuffix(string(rec.Payload), "#0") // the head of its topic, tried while down
		if rec.Status != idemstore.OutboxDelivered || (first && rec.Attempts < 5) || (!first && rec.Attempts != 1) {
			t.Fatalf("after the outage: %+v", rec)
		}
		if rec.Delivered.Before(back) {
			t.Fatalf("delivered while the receiver was down: %+v", rec)
		}
	}
	checkOrder(t, s, r.log)
}

func testOutboxPoison[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	key := idem.Key{Job: "poison", Period: "p"}
	msgs := []outbox.Message{msg("bad", 0), msg("bad", 1), msg("good", 0), msg("flaky", 0), msg("good", 1)}
	ids, err := putTx(ctx, s, key, nil, msgs, idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	r := receiver{fail: func(d outbox.Delivery) error {
		switch {
		case d.ID == ids[0]:
			return idem.Permanent(errors.New("422: schema rejected"))
		case d.Topic == "flaky":
			return errors.New("503 always")
		}
		return nil
	}}
	opts := []outbox.Option{outbox.WithClock(clk), outbox.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Minute)))}
	for range 10 {
		relayOnce(t, s, &r, opts...)
		clk.Advance(time.Minute)
	}
	parked := list(t, s, idemstore.OutboxFilter{Status: idemstore.OutboxParked})
	if len(parked) != 2 || parked[0].ID != ids[0] || parked[1].ID != ids[3] {
		t.Fatalf("parked %+v, want %s and %s", parked, ids[0], ids[3])
	}
	if parked[0].LastError != "422: schema rejected" || parked[0].Attempts != 1 {
		t.Fatalf("poison parked as %+v", parked[0])
	}
	if parked[1].LastError != "503 always" || parked[1].Attempts != 3 {
		t.Fatalf("flaky parked as %+v", parked[1])
	}
	if got, want := r.ids(), []string{ids[1], ids[2], ids[4]}; !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("delivered %v, want %v (a parked message blocks nothing)", got, want)
	}
	checkOrder(t, s, r.log)
	// An operator retries the poison message (fixed downstream) and drops
	// the flaky one.
	r.fail = nil
	if err := s.RetryOutbox(ctx, ids[0], clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.RetryOutbox(ctx, ids[0], clk.Now()); !errors.Is(err, outbox.ErrMessageNotFound) {
		t.Fatalf("retry of a pending message: %v, want ErrMessageNotFound", err)
	}
	if err := s.DropOutbox(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if err := s.DropOutbox(ctx, ids[3]); !errors.Is(err, outbox.ErrMessageNotFound) {
		t.Fatalf("second drop: %v, want ErrMessageNotFound", err)
	}
	res := relayOnce(t, s, &r, opts...)
	if res.Delivered != 1 {
		t.Fatalf("after retry: %+v", res)
	}
	last := r.accepted()[len(r.accepted())-1]
	if last.ID != ids[0] || last.Attempt != 1 {
		t.Fatalf("retried message delivered as %+v", last)
	}
	if n := len(list(t, s, idemstore.OutboxFilter{})); n != 4 {
		t.Fatalf("%d messages after a drop, want 4", n)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func testOutboxFencing[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	ids, err := putTx(ctx, s, idem.Key{Job: "fence", Period: "p"}, nil, []outbox.Message{msg("f", 0)}, idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 10, Owner: "relay-a", Now: clk.Now(), Lease: time.Minute})
	if err != nil || len(a) != 1 || a[0].ID != ids[0] || a[0].Attempts != 1 || a[0].Owner != "relay-a" {
		t.Fatalf("claim a: %+v, %v", a, err)
	}
	// Held: nobody else gets it.
	if b, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 10, Owner: "relay-b", Now: clk.Now().Add(59 * time.Second), Lease: time.Minute}); err != nil || len(b) != 0 {
		t.Fatalf("claim during the lease: %+v, %v", b, err)
	}
	clk.Advance(time.Minute)
	b, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 10, Owner: "relay-b", Now: clk.Now(), Lease: time.Minute})
	if err != nil || len(b) != 1 || b[0].Token <= a[0].Token || b[0].Attempts != 2 {
		t.Fatalf("claim after the lease: %+v, %v", b, err)
	}
	if err := s.DeliveredOutbox(ctx, ids[0], a[0].Token, clk.Now()); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale delivered mark: %v, want ErrLeaseLost", err)
	}
	if err := s.FailOutbox(ctx, ids[0], a[0].Token, idemstore.OutboxFailure{Now: clk.Now(), Park: true, Error: "stale"}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale failure: %v, want ErrLeaseLost", err)
	}
	if err := s.DeliveredOutbox(ctx, ids[0], b[0].Token, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.DeliveredOutbox(ctx, ids[0], b[0].Token, clk.Now()); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second delivered mark: %v, want ErrLeaseLost", err)
	}
	// The relay reports a refused end as superseded, and calls OnDelivery.
	ids, err = putTx(ctx, s, idem.Key{Job: "fence", Period: "q"}, nil, []outbox.Message{msg("g", 0)}, idem.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var got []outbox.DeliveryResult
	steal := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		// Another relay takes the message over while this one delivers.
		clk.Advance(2 * time.Minute) // past the relay's lease
		if _, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 1, Owner: "thief", Now: clk.Now(), Lease: time.Minute}); err != nil {
			return err
		}
		return nil
	})
	res := relayOnce(t, s, steal, outbox.WithClock(clk), outbox.OnDelivery(func(r outbox.DeliveryResult) { got = append(got, r) }))
	if res.Superseded != 1 || res.Delivered != 0 || len(got) != 1 || got[0].Outcome != outbox.DeliverySuperseded || got[0].ID != ids[0] {
		t.Fatalf("relay whose lease was taken over: %+v, %+v", res, got)
	}
}

func testOutboxPrune[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	for p := range 4 {
		if _, err := putTx(ctx, s, idem.Key{Job: "prune", Period: fmt.Sprintf("p%d", p)}, nil, []outbox.Message{msg("t", p), msg("u", p)}, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := s.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[0].Topic != "t" || stats[0].Backlog != 4 || !stats[0].Oldest.Equal(outboxT0) || stats[1].Topic != "u" {
		t.Fatalf("stats %+v", stats)
	}
	// t's messages fail once each, u's for good: each pass delivers one
	// of t's.
	tries := map[string]int{}
	r := receiver{fail: func(d outbox.Delivery) error {
		tries[d.ID]++
		switch {
		case d.Topic == "u":
			return idem.Permanent(errors.New("no"))
		case tries[d.ID] == 1:
			return errors.New("not yet")
		}
		return nil
	}}
	for range 5 {
		relayOnce(t, s, &r, outbox.WithClock(clk), outbox.WithBackoff(idem.Constant(time.Minute)))
		clk.Advance(time.Minute)
	}
	stats, err = s.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats[0].Backlog != 0 || stats[0].Delivered != 4 || !stats[0].Oldest.IsZero() || stats[1].Parked != 4 {
		t.Fatalf("stats after delivery %+v", stats)
	}
	// Delivered 4, 3, 2 and 1 minutes ago; retention 150 s: two go.
	res := relayOnce(t, s, &r, outbox.WithClock(clk), outbox.WithRetention(150*time.Second))
	if res.Pruned != 2 {
		t.Fatalf("pruned %d, want 2", res.Pruned)
	}
	if n := len(list(t, s, idemstore.OutboxFilter{Status: idemstore.OutboxDelivered})); n != 2 {
		t.Fatalf("%d delivered left, want 2", n)
	}
	if n := len(list(t, s, idemstore.OutboxFilter{Status: idemstore.OutboxParked})); n != 4 {
		t.Fatalf("prune touched parked messages: %d left, want 4", n)
	}
	if n := len(list(t, s, idemstore.OutboxFilter{Limit: 3})); n != 3 {
		t.Fatalf("Limit 3 listed %d", n)
	}
}

func testOutboxRelays[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	const topics, per = 6, 5
	for p := range per {
		var msgs []outbox.Message
		for tp := range topics {
			msgs = append(msgs, msg("c"+strconv.Itoa(tp), p))
		}
		if _, err := putTx(ctx, s, idem.Key{Job: "relays", Period: fmt.Sprintf("p%d", p)}, nil, msgs); err != nil {
			t.Fatal(err)
		}
	}
	var r receiver
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := outbox.RelayOnce(ctx, s, &r, outbox.WithBatch(2), outbox.WithOwner(fmt.Sprintf("relay-%d", i))); err != nil {
					errs <- err
					return
				}
				if len(r.accepted()) == topics*per {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, d := range r.accepted() {
		seen[d.ID]++
	}
	if len(seen) != topics*per {
		t.Fatalf("%d of %d messages delivered", len(seen), topics*per)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times by concurrent relays", id, n)
		}
	}
	checkOrder(t, s, r.log)
}

func testOutboxEach[Tx any](t *testing.T, s outboxLedger[Tx], _ *Clock) {
	_, ok := any(s).(idemstore.ItemTxStore[Tx])
	if !ok {
		t.Skipf("%T is not an idemstore.ItemTxStore", s)
	}
	ctx := context.Background()
	clk := NewAutoClock(outboxT0)
	key := idem.Key{Job: "fan", Period: "p"}
	failed := map[string]bool{}
	var mu sync.Mutex
	_, err := idem.EachTx(ctx, idem.TxStoreOf[Tx](s), key, idem.Items(func(yield func(string) bool) {
		for i := range 5 {
			if !yield("acct-" + strconv.Itoa(i)) {
				return
			}
		}
	}), func(ctx context.Context, tx Tx, item string) error {
		if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: "grants", Payload: []byte(item)}); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if item == "acct-3" && !failed[item] {
			failed[item] = true
			return errors.New("first attempt of acct-3 fails after its Put")
		}
		return nil
	}, idem.WithClock(clk), idem.WithBackoff(idem.Constant(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	recs := list(t, s, idemstore.OutboxFilter{})
	if len(recs) != 5 {
		t.Fatalf("%d messages for 5 items (one retried), want 5: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if r.ID != key.ItemRequestID(r.Item)+"-0" || string(r.Payload) != r.Item || r.Key != key {
			t.Fatalf("item message %+v", r)
		}
	}
}

func testOutboxCatchUp[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	cs, ok := any(s).(idemstore.CatchUpTxStore[Tx])
	if !ok {
		t.Skipf("%T is not an idemstore.CatchUpTxStore", s)
	}
	ctx := context.Background()
	res, err := idem.CatchUpTx(ctx, idem.TxStoreOf[Tx](cs), "daily", idem.Daily(time.UTC), func(ctx context.Context, tx Tx, p idem.Period) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "daily", Payload: []byte(p.Name)})
		return err
	}, idem.WithClock(clk), idem.Since(outboxT0.Add(-72*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	recs := list(t, s, idemstore.OutboxFilter{})
	if len(recs) != res.Count(idem.Ran) || res.Count(idem.Ran) < 3 {
		t.Fatalf("%d messages for %d periods run", len(recs), res.Count(idem.Ran))
	}
	for i, r := range recs {
		if r.ID != r.Key.RequestID()+"-0" || string(r.Payload) != r.Key.Period || (i > 0 && r.Key.Period <= recs[i-1].Key.Period) {
			t.Fatalf("catch-up message %d: %+v", i, r)
		}
	}
}

// testOutboxRelayStopped: twenty times, a relay's context ends while the
// receiver (a real HTTP server, through outbox.Webhook) holds the POST of
// topic slow's head, the first message of the relay's batch. The message
// under way counts an attempt each time (it reached the receiver); the
// ones claimed with it and never posted (the other topics' heads, and
// slow's next one) are given back, never posted, their attempts still 0
// (the store must be an idemstore.OutboxReleaser for that), and none
// parks. Then one relay delivers everything, slow's
// in order, each never-posted message at its first attempt.
func testOutboxRelayStopped[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	key := idem.Key{Job: "notify", Period: "stops"}
	ids, err := putTx(ctx, s, key, nil, []outbox.Message{msg("slow", 0), msg("slow", 1), msg("a", 0), msg("b", 0), msg("c", 0)})
	if err != nil {
		t.Fatal(err)
	}
	slow := ids[0]
	var (
		mu       sync.Mutex
		blocking = true
		posts    []string             // the ids of the POSTs that reached the receiver, in order
		attempts = map[string][]int{} // their Idem-Attempt, by id
	)
	held, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client hang up
		id := r.Header.Get("Idempotency-Key")
		n, _ := strconv.Atoi(r.Header.Get("Idem-Attempt"))
		mu.Lock()
		posts = append(posts, id)
		attempts[id] = append(attempts[id], n)
		hold := blocking && id == slow
		mu.Unlock()
		if hold {
			select {
			case held <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done(): // the relay gave the request up
			case <-release: // the test ends
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handlers
	deliver := outbox.Webhook(srv.URL, srv.Client())

	const stops = 20
	for i := range stops {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- outbox.Relay(rctx, s, deliver, outbox.WithPoll(time.Millisecond)) }()
		testwait.Recv(t, held, "stop %d: the relay's POST of %s", i+1, slow)
		cancel()
		if err := testwait.Recv(t, done, "stop %d: Relay to return after its context ended", i+1); err != nil {
			t.Fatalf("stop %d: Relay: %v", i+1, err)
		}
	}
	_, releases := s.(idemstore.OutboxReleaser)
	for _, rec := range list(t, s, idemstore.OutboxFilter{}) {
		mu.Lock()
		got := slices.Clone(attempts[rec.ID])
		mu.Unlock()
		switch {
		case rec.Status != idemstore.OutboxPending:
			t.Fatalf("after %d stops: %s is %s, want pending: %+v", stops, rec.ID, rec.Status, rec)
		case rec.ID == slow:
			if rec.Attempts != stops || len(got) < stops {
				t.Fatalf("after %d stops: %s, posted at attempts %v: %d attempts recorded, want %d (one a stop)", stops, rec.ID, got, rec.Attempts, stops)
			}
		case len(got) > 0:
			t.Fatalf("after %d stops: %s, never due to be handed out, was posted at attempts %v", stops, rec.ID, got)
		case rec.Attempts != 0:
			hint := ""
			if !releases {
				hint = fmt.Sprintf(" (the store %T cannot give claims back: it is no idemstore.OutboxReleaser)", s)
			}
			t.Fatalf("after %d stops: %s was never posted, yet %d attempts are counted%s: %+v", stops, rec.ID, rec.Attempts, hint, rec)
		}
	}

	mu.Lock()
	blocking, posts = false, nil
	mu.Unlock()
	res := relayOnce(t, s, deliver)
	if res.Delivered != len(ids) || res.Parked != 0 {
		t.Fatalf("the relay after the stops: %+v; want all %d delivered", res, len(ids))
	}
	for _, rec := range list(t, s, idemstore.OutboxFilter{}) {
		if rec.Status != idemstore.OutboxDelivered {
			t.Fatalf("after the last relay: %+v", rec)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if i, j := slices.Index(posts, ids[0]), slices.Index(posts, ids[1]); i < 0 || j < i {
		t.Fatalf("the last relay posted slow's messages out of order: %q", posts)
	}
	for _, id := range ids[1:] {
		if got := attempts[id]; len(got) == 0 || slices.ContainsFunc(got, func(n int) bool { return n != 1 }) {
			t.Fatalf("%s, never posted before the last relay: posted at attempts %v, want 1", id, got)
		}
	}
}
