package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/outbox"
)

// countingClaims is a real ledger that counts the relay's claims.
type countingClaims struct {
	testledger.Store
	claims atomic.Int32
}

func (c *countingClaims) ClaimOutbox(ctx context.Context, req idemstore.OutboxClaimRequest) ([]idemstore.OutboxRecord, error) {
	c.claims.Add(1)
	return c.Store.ClaimOutbox(ctx, req)
}

// putTopic queues n messages of topic, one RunTx each, and returns their
// ids in commit order.
func putTopic(t *testing.T, l *idem.Ledger, topic string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		key := idem.Key{Job: "settle", Period: fmt.Sprintf("%s-%03d", topic, i)}
		if err := l.RunTx(context.Background(), key, func(ctx context.Context, tx *sql.Tx) error {
			id, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})
			ids = append(ids, id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestRelayClaimsTopicRuns: a relay pass over one topic's backlog claims
// the topic's messages in runs (WithBatch at a time), not one claim per
// message, and still hands them out one at a time in commit order.
func TestRelayClaimsTopicRuns(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	ids := putTopic(t, l, "pay", 20)
	s := &countingClaims{Store: testledger.SPI(t, l)}
	var c collect
	res, err := outbox.RelayOnce(ctx, s, &c, outbox.WithBatch(8))
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 20 || res.Claimed != 20 || len(c.Got) != 20 {
		t.Fatalf("result %+v, %d delivered", res, len(c.Got))
	}
	for i, d := range c.Got {
		if d.ID != ids[i] || d.Attempt != 1 {
			t.Fatalf("delivery %d: %+v, want %s, attempt 1", i, d, ids[i])
		}
	}
	// 20 messages in runs of 8: 3 claims, and one that finds nothing.
	if n := s.claims.Load(); n != 4 {
		t.Fatalf("%d claims for 20 messages of one topic in runs of 8, want 4", n)
	}
}

// TestRelayRunStopsAtFailure: when a message of a claimed run fails, the
// rest of its topic's run is not handed out: it is given back as it was
// (pending, not leased, its attempts not counted), and the next pass
// delivers it after the failed one, in order. Another topic's run in the
// same claim goes on.
func TestRelayRunStopsAtFailure(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	pay := putTopic(t, l, "pay", 5)
	mail := putTopic(t, l, "mail", 3)
	clk := idemtest.NewClock(t0)
	fail := true
	var got []outbox.Delivery
	d := outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		got = append(got, d)
		if d.ID == pay[1] && fail {
			return errors.New("503")
		}
		return nil
	})
	opts := []outbox.Option{outbox.WithBatch(16), outbox.WithClock(clk), outbox.WithBackoff(idem.Constant(time.Minute))}
	res, err := outbox.RelayOnce(ctx, l, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	byTopic := map[string][]string{}
	for _, d := range got {
		byTopic[d.Topic] = append(byTopic[d.Topic], d.ID)
	}
	if fmt.Sprint(byTopic["pay"]) != fmt.Sprint(pay[:2]) || fmt.Sprint(byTopic["mail"]) != fmt.Sprint(mail) ||
		res.Claimed != 5 || res.Delivered != 4 || res.Retrying != 1 {
		t.Fatalf("first pass handed out %v (%+v), want pay %v, mail %v: pay's run stops at its failure, mail's goes on",
			byTopic, res, pay[:2], mail)
	}
	recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{Topic: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[2:] {
		if r.Status != idemstore.OutboxPending || r.Attempts != 0 || !r.LeaseUntil.IsZero() {
			t.Fatalf("a message of the run after the failure: %+v; want it given back pending, never attempted, not leased", r)
		}
	}
	fail, got = false, nil
	clk.Advance(time.Minute)
	if res, err = outbox.RelayOnce(ctx, l, d, opts...); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(got)) != fmt.Sprint(pay[1:]) || res.Delivered != 4 {
		t.Fatalf("second pass handed out %v (%+v), want %v in order", ids(got), res, pay[1:])
	}
	for i, d := range got {
		want := 1 // pay[1] failed once; the others were given back, never attempted
		if i == 0 {
			want = 2
		}
		if d.Attempt != want {
			t.Fatalf("%s delivered at attempt %d, want %d", d.ID, d.Attempt, want)
		}
	}
}

func ids(ds []outbox.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}
