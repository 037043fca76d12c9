package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

// collect is a deliverer that records what it was handed, in order.
type collect struct {
	got []idem.Delivery
}

func (c *collect) Deliver(_ context.Context, d idem.Delivery) error {
	c.got = append(c.got, d)
	return nil
}

func TestOutboxPutInRunTxThenRelay(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	var ids []string
	err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		for i := range 3 {
			id, err := idem.Put(ctx, tx, idem.Message{Topic: "pay", Payload: []byte(fmt.Sprint(i)), Headers: map[string]string{"X-N": fmt.Sprint(i)}})
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
	want := []string{key.RequestID() + "-0", key.RequestID() + "-1", key.RequestID() + "-2"}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	var c collect
	res, err := idem.RelayOnce(ctx, l, &c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 3 || len(c.got) != 3 {
		t.Fatalf("result %+v, delivered %v", res, c.got)
	}
	for i, d := range c.got {
		if d.ID != want[i] || string(d.Payload) != fmt.Sprint(i) || d.Headers["X-N"] != fmt.Sprint(i) || d.Attempt != 1 || d.Key != key {
			t.Fatalf("delivery %d: %+v", i, d)
		}
	}
	if _, err := idem.Put(ctx, (*sql.Tx)(nil), idem.Message{Topic: "x"}); !errors.Is(err, idem.ErrNoOutbox) {
		t.Fatalf("Put outside a body: %v, want ErrNoOutbox", err)
	}
}

// TestLedgerOutboxConformance runs idemtest's outbox suite on the SQLite
// ledger.
func TestLedgerOutboxConformance(t *testing.T) {
	t.Parallel()
	idemtest.TestOutbox(t, func(t *testing.T) idemtest.OutboxLedger[*sql.Tx] { return openLedger(t, t.TempDir()) })
}
