package idem_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/catchup"
	"github.com/idemgo/idem/fanout"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/scheduler"
)

// lookupOnly has the methods of idem.Store and none of idemstore.Store's:
// it compiles where a Store is taken, and is no store.
type lookupOnly struct{ l *idem.Ledger }

func (s lookupOnly) Lookup(ctx context.Context, k idem.Key) (idem.Record, bool, error) {
	return s.l.Lookup(ctx, k)
}
func (s lookupOnly) Resolve(ctx context.Context, k idem.Key, to idem.Resolution) error {
	return s.l.Resolve(ctx, k, to)
}
func (s lookupOnly) RunTx(ctx context.Context, k idem.Key, fn func(context.Context, *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, s, k, fn, opts...)
}

// TestWrongStoreIsAnError: the calls take idem.Store, whose store methods
// are out of view, so a store that cannot serve a call compiles; the call
// is then an error naming the call and the store's type, before anything
// runs or is written, and ReportTo or OnResult hears of it. A state file has no item
// sets and no outbox; a type with Lookup and Resolve alone is no store.
func TestWrongStoreIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	sf := openState(t, t.TempDir())
	fake := lookupOnly{l}
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	items := fanout.Items(func(yield func(string) bool) { yield("a") })
	itemFn := func(context.Context, string) error { ran = true; return nil }
	periodFn := func(context.Context, idem.Period) error { ran = true; return nil }
	txPeriodFn := func(context.Context, *sql.Tx, idem.Period) error { ran = true; return nil }
	relay := outbox.DeliverFunc(func(context.Context, outbox.Delivery) error { ran = true; return nil })
	key := idem.Key{Job: "wrong-store", Period: "2026-10-27"}
	var r idem.Result
	cases := []struct {
		name, call, store string
		do                func() error
	}{
		{"RunOn", "Run", "idem_test.lookupOnly", func() error { return idem.RunOn(ctx, fake, key, fn, idem.ReportTo(&r)) }},
		{"RunValueOn", "Run", "idem_test.lookupOnly", func() error {
			_, err := idem.RunValueOn(ctx, fake, key, func(context.Context) (int, error) { ran = true; return 1, nil })
			return err
		}},
		{"RunTx", "RunTx", "idem_test.lookupOnly", func() error {
			return idem.RunTx(ctx, fake, key, func(context.Context, *sql.Tx) error { ran = true; return nil }, idem.ReportTo(&r))
		}},
		{"catchup.Run", "catchup.Run", "idem_test.lookupOnly", func() error {
			_, err := catchup.Run(ctx, fake, key.Job, idem.Daily(time.UTC), periodFn)
			return err
		}},
		{"catchup.RunTx", "catchup.RunTx", "idem_test.lookupOnly", func() error {
			_, err := catchup.RunTx(ctx, fake, key.Job, idem.Daily(time.UTC), txPeriodFn)
			return err
		}},
		{"fanout.Each on a state file", "Each", "*idem.StateFile", func() error {
			_, err := fanout.Each(ctx, sf, key, items, itemFn, idem.OnResult(func(res idem.Result) { r = res }))
			return err
		}},
		{"fanout.EachTx", "fanout.EachTx", "idem_test.lookupOnly", func() error {
			_, err := fanout.EachTx(ctx, fake, key, items, func(context.Context, *sql.Tx, string) error { ran = true; return nil })
			return err
		}},
		{"outbox.RelayOnce on a state file", "outbox.RelayOnce", "*idem.StateFile", func() error {
			_, err := outbox.RelayOnce(ctx, sf, relay)
			return err
		}},
		{"outbox.Relay", "outbox.Relay", "idem_test.lookupOnly", func() error { return outbox.Relay(ctx, fake, relay) }},
		{"Scheduler.AddRelay on a state file", "Scheduler.AddRelay", "*idem.StateFile", func() error {
			return scheduler.New(sf).AddRelay("r", sf, relay)
		}},
		{"scheduler.New", "scheduler.New", "idem_test.lookupOnly", func() error {
			return scheduler.New(fake).Add(key.Job, idem.Daily(time.UTC), periodFn)
		}},
		{"scheduler.AddTx", "scheduler.AddTx", "*idem.StateFile", func() error {
			return scheduler.AddTx(scheduler.New(sf), key.Job, idem.Daily(time.UTC), txPeriodFn)
		}},
	}
	for _, c := range cases {
		r = idem.Result{}
		err := c.do()
		if err == nil || !strings.Contains(err.Error(), c.call) || !strings.Contains(err.Error(), c.store) {
			t.Errorf("%s: %v; want an error naming the call %s and the store %s", c.name, err, c.call, c.store)
		}
		reports := strings.Contains(c.name, "RunOn") || c.name == "RunTx" || strings.HasPrefix(c.name, "fanout.Each ")
		if reports && (r.Key != key || r.Err == nil || r.Err.Error() != err.Error()) {
			t.Errorf("%s: ReportTo got %+v, want the call's error", c.name, r)
		}
	}
	if ran {
		t.Error("a call on a wrong store ran fn or delivered")
	}
	if recs, err := l.List(ctx, idem.Filter{}); err != nil || len(recs) != 0 {
		t.Errorf("the ledger behind the wrong store holds %d records (%v); want none", len(recs), err)
	}
	if recs, err := sf.List(ctx, idem.Filter{}); err != nil || len(recs) != 0 {
		t.Errorf("the state file holds %d records (%v); want none", len(recs), err)
	}
}
