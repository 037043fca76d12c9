package idem_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
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
	items := idem.Items(func(yield func(string) bool) { yield("a") })
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
		{"CatchUp", "CatchUp", "idem_test.lookupOnly", func() error {
			_, err := idem.CatchUp(ctx, fake, key.Job, idem.Daily(time.UTC), periodFn)
			return err
		}},
		{"CatchUpTx", "CatchUpTx", "idem_test.lookupOnly", func() error {
			_, err := idem.CatchUpTx(ctx, fake, key.Job, idem.Daily(time.UTC), txPeriodFn)
			return err
		}},
		{"Each on a state file", "Each", "*idem.StateFile", func() error {
			_, err := idem.Each(ctx, sf, key, items, itemFn, idem.OnResult(func(res idem.Result) { r = res }))
			return err
		}},
		{"EachTx", "EachTx", "idem_test.lookupOnly", func() error {
			_, err := idem.EachTx(ctx, fake, key, items, func(context.Context, *sql.Tx, string) error { ran = true; return nil })
			return err
		}},
		{"outbox.RelayOnce on a state file", "outbox.RelayOnce", "*idem.StateFile", func() error {
			_, err := outbox.RelayOnce(ctx, sf, relay)
			return err
		}},
		{"outbox.Relay", "outbox.Relay", "idem_test.lookupOnly", func() error { return outbox.Relay(ctx, fake, relay) }},
		{"outbox.NewRelay on a state file", "outbox.NewRelay", "*idem.StateFile", func() error {
			_, err := outbox.NewRelay(sf, relay)
			return err
		}},
		{"NewScheduler", "NewScheduler", "idem_test.lookupOnly", func() error {
			return idem.NewScheduler(fake).Add(key.Job, idem.Daily(time.UTC), periodFn)
		}},
		{"AddTx", "AddTx", "*idem.StateFile", func() error {
			return idem.AddTx(idem.NewScheduler(sf), key.Job, idem.Daily(time.UTC), txPeriodFn)
		}},
	}
	for _, c := range cases {
		r = idem.Result{}
		err := c.do()
		if err == nil || !strings.Contains(err.Error(), c.call) || !strings.Contains(err.Error(), c.store) {
			t.Errorf("%s: %v; want an error naming the call %s and the store %s", c.name, err, c.call, c.store)
		}
		reports := strings.Contains(c.name, "RunOn") || c.name == "RunTx" || strings.HasPrefix(c.name, "Each ")
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
