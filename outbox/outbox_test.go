package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
)

func TestOutboxPutInRunTxThenRelay(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	var ids []string
	err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		for i := range 3 {
			id, err := outbox.Put(ctx, tx, outbox.Message{Topic: "pay", Payload: []byte(fmt.Sprint(i)), Headers: map[string]string{"X-N": fmt.Sprint(i)}})
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
	res, err := outbox.RelayOnce(ctx, l, &c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 3 || len(c.Got) != 3 {
		t.Fatalf("result %+v, delivered %v", res, c.Got)
	}
	for i, d := range c.Got {
		if d.ID != want[i] || string(d.Payload) != fmt.Sprint(i) || d.Headers["X-N"] != fmt.Sprint(i) || d.Attempt != 1 || d.Key != key {
			t.Fatalf("delivery %d: %+v", i, d)
		}
	}
	if _, err := outbox.Put(ctx, (*sql.Tx)(nil), outbox.Message{Topic: "x"}); !errors.Is(err, outbox.ErrNoOutbox) {
		t.Fatalf("Put outside a body: %v, want ErrNoOutbox", err)
	}
}

// noOutbox is a transactional store without an outbox: the ledger with
// its outbox methods hidden (a store of another package might be so).
type noOutbox struct{ idemstore.TxStore[*sql.Tx] }

func (s noOutbox) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, *sql.Tx) error, opts ...idem.Option) error {
	return idem.RunTx(ctx, s, key, fn, opts...)
}

// TestPutWhereNoOutbox: Put refuses, with ErrNoOutbox and nothing queued,
// on a store without an outbox, in a plain Run's fn (also one nested in a
// RunTx body, which must not write to the enclosing transaction), and in
// Each's fn.
func TestPutWhereNoOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	err := idem.RunTx(ctx, noOutbox{testledger.SPI(t, l)}, idem.Key{Job: "j", Period: "a"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t"})
		return idem.Permanent(err)
	})
	if !errors.Is(err, outbox.ErrNoOutbox) || !strings.Contains(err.Error(), "has no outbox") {
		t.Fatalf("Put on a store without an outbox: %v", err)
	}
	other := openLedger(t, t.TempDir()) // (a Run on l would wait for the RunTx's write lock)
	err = l.RunTx(ctx, idem.Key{Job: "j", Period: "b"}, func(ctx context.Context, tx *sql.Tx) error {
		return other.Run(ctx, idem.Key{Job: "inner", Period: "b"}, func(ctx context.Context) error {
			_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t"})
			return idem.Permanent(err)
		})
	})
	if !errors.Is(err, outbox.ErrNoOutbox) {
		t.Fatalf("Put in a Run nested in a RunTx body: %v", err)
	}
	var putErr error
	res, err := idem.Each(ctx, l, idem.Key{Job: "j", Period: "c"}, idem.Items(func(yield func(string) bool) { yield("x") }),
		func(ctx context.Context, item string) error {
			_, putErr = outbox.Put(ctx, (*sql.Tx)(nil), outbox.Message{Topic: "t"})
			return idem.Permanent(putErr)
		})
	if err != nil || res.Counts.Parked != 1 || !errors.Is(putErr, outbox.ErrNoOutbox) {
		t.Fatalf("Put in Each's fn: %v; Each: %+v, %v", putErr, res, err)
	}
	if recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{}); err != nil || len(recs) != 0 {
		t.Fatalf("outbox after refused Puts: %+v, %v", recs, err)
	}
}

// TestSchedulerRelay: a relay added to a Scheduler delivers while the
// Scheduler runs (here: what an AddTx job queues), shows in Status, and
// stops with it.
func TestSchedulerRelay(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	clk := idemtest.NewClock(t0)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	err := idem.AddTx(s, "settle", idem.Daily(time.UTC), func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "settled", Payload: []byte(p.Name)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var results []outbox.DeliveryResult
	deliver := outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(d.Payload))
		return nil
	})
	if err := s.AddRelay("notify", newRelay(t, l, deliver, outbox.OnDelivery(func(r outbox.DeliveryResult) {
		mu.Lock()
		defer mu.Unlock()
		results = append(results, r)
	}))); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRelay("notify", newRelay(t, l, deliver)); err == nil {
		t.Fatal("a second relay of the same name was added")
	}
	if _, err := outbox.NewRelay(l, deliver, outbox.WithBatch(0)); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("invalid option: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// delivered(n) reports whether n messages arrived; if not, it moves
	// the fake clock by the relay's poll interval, so that it looks again.
	delivered := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			ok := len(got) == n
			mu.Unlock()
			if !ok {
				clk.Advance(outbox.DefaultPoll)
			}
			return ok
		}
	}
	testwait.Until(t, delivered(1), "the relay to deliver the first period's message")
	st := s.Status()
	if len(st.Relays) != 1 || st.Relays[0].Name != "notify" || !st.Relays[0].Running || !st.Ready {
		t.Fatalf("status %+v", st)
	}
	testwait.Until(t, func() bool { return s.Status().Relays[0].Delivered == 1 }, "the relay's status to count the delivery")
	// The next day: the job runs and the relay delivers its message.
	clk.Advance(24 * time.Hour)
	testwait.Until(t, delivered(2), "the relay to deliver the second period's message")
	cancel()
	testwait.Recv(t, done, "the Scheduler to stop")
	if st := s.Status(); st.Relays[0].Running {
		t.Fatalf("the relay runs after the Scheduler stopped: %+v", st.Relays[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0] >= got[1] || len(results) != 2 || results[0].Outcome != outbox.DeliverySent {
		t.Fatalf("delivered %v, results %+v", got, results)
	}
}

// TestSchedulerRelayLeasesOnRealClock: a Scheduler's relay does not take
// the Scheduler's clock for its leases. With a test clock that jumps past
// the lease while a delivery is under way, another relay on the store
// (here the Scheduler's second relay; a replica's alike) must not claim
// the message again: the lease is on the real clock, as a relay's is by
// default.
func TestSchedulerRelayLeasesOnRealClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if err := l.RunTx(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "pay"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	clk := idemtest.NewClock(t0)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		if calls.Add(1) == 1 {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	for _, name := range []string{"a", "b"} {
		if err := s.AddRelay(name, newRelay(t, l, deliver)); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		testwait.Recv(t, done, "the Scheduler to stop")
	}()
	testwait.Recv(t, started, "the first delivery to start")
	// Past the lease on the test clock, twice: the second wait sees a pass
	// that began after the first jump.
	for _, d := range []time.Duration{2 * outbox.DefaultLease, time.Second} {
		clk.Advance(d)
		jumped := clk.Now()
		testwait.Until(t, func() bool {
			for _, r := range s.Status().Relays {
				if !r.LastPass.Before(jumped) {
					return true
				}
			}
			return false
		}, "a relay's pass after the test clock moved to %v", jumped)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the message was handed out %d times while its first delivery was under way, want 1 (the lease on the Scheduler's test clock)", n)
	}
	close(release)
	testwait.Until(t, func() bool {
		n := int64(0)
		for _, r := range s.Status().Relays {
			n += r.Delivered
		}
		return n == 1
	}, "the delivery to be recorded")
}

// TestRelayInvalidOptions: a relay option given a value it cannot take,
// or a nil one, is an error matching ErrInvalidOption, returned before
// anything is claimed or delivered.
func TestRelayInvalidOptions(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	if err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "pay"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]outbox.Option{
		"nil":               nil,
		"RelayBatch(0)":     outbox.WithBatch(0),
		"RelayLease(0)":     outbox.WithLease(0),
		"RelayPoll(0)":      outbox.WithPoll(0),
		"RelayRetention(0)": outbox.WithRetention(0),
		"RelayBackoff(nil)": outbox.WithBackoff(nil),
		"RelayClock(nil)":   outbox.WithClock(nil),
		`RelayOwner("")`:    outbox.WithOwner(""),
		"WithStop(nil)":     outbox.WithStop(nil),
	} {
		var c collect
		res, err := outbox.RelayOnce(ctx, l, &c, o)
		if !errors.Is(err, idem.ErrInvalidOption) || res != (outbox.Result{}) || len(c.Got) != 0 {
			t.Errorf("RelayOnce with %s: %+v, %v, delivered %d; want ErrInvalidOption and nothing done", name, res, err, len(c.Got))
		}
		if err := outbox.Relay(ctx, l, &c, o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("Relay with %s: %v, want ErrInvalidOption", name, err)
		}
	}
	msgs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(msgs) != 1 || msgs[0].Status != idemstore.OutboxPending || msgs[0].Attempts != 0 {
		t.Fatalf("outbox after the refused relays: %+v, %v; want the message pending, never attempted", msgs, err)
	}
}

// failingClaims is a real ledger whose outbox claims fail while fail is
// set: a transient store error on the relay's path.
type failingClaims struct {
	testledger.Store
	fail atomic.Bool
}

func (f *failingClaims) ClaimOutbox(ctx context.Context, req idemstore.OutboxClaimRequest) ([]idemstore.OutboxRecord, error) {
	if f.fail.Load() {
		return nil, errors.New("database is locked (injected)")
	}
	return f.Store.ClaimOutbox(ctx, req)
}

// TestSchedulerRelayStoreError: a relay whose pass fails on a store error
// makes the Scheduler unready, with the error in its status; once the
// store answers again, the next pass delivers and the Scheduler is ready.
func TestSchedulerRelayStoreError(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	if err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "pay"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fc := &failingClaims{Store: testledger.SPI(t, l)}
	fc.fail.Store(true)
	clk := idemtest.NewClock(t0)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c collect
	var mu sync.Mutex
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		return c.Deliver(ctx, d)
	})
	if err := s.AddRelay("notify", newRelay(t, fc, deliver)); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		testwait.Recv(t, done, "the Scheduler to stop")
	}()
	testwait.Until(t, func() bool {
		st := s.Status()
		return len(st.Relays) == 1 && !st.Relays[0].Ready
	}, "the relay's failed pass to show in the status")
	st := s.Status()
	if st.Ready || !strings.Contains(st.Relays[0].LastError, "injected") || !strings.Contains(st.Relays[0].Why, "injected") {
		t.Fatalf("status after a failed pass: %+v", st)
	}
	fc.fail.Store(false)
	testwait.Until(t, func() bool {
		if s.Status().Relays[0].Delivered == 1 {
			return true
		}
		clk.Advance(outbox.DefaultPoll) // the next pass
		return false
	}, "the relay to deliver once the store answers")
	if st := s.Status(); !st.Ready || !st.Relays[0].Ready || st.Relays[0].LastError != "" {
		t.Fatalf("status after the store recovered: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(c.Got) != 1 || c.Got[0].Attempt != 1 {
		t.Fatalf("delivered %+v, want the message once at attempt 1 (the failed claims took none)", c.Got)
	}
}

// TestRelayCancelAbortsDelivery: what Relay's doc says of a cancelled ctx.
// The delivery under way sees its context end, Relay returns nil, and the
// message stays pending, due again at once, and is handed out again (the
// same id) by the next relay.
func TestRelayCancelAbortsDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	var id string
	err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		id, err = outbox.Put(ctx, tx, outbox.Message{Topic: "pay", Payload: []byte("x")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	started, aborted := make(chan struct{}), make(chan error, 1)
	deliver := outbox.DeliverFunc(func(dctx context.Context, d outbox.Delivery) error {
		close(started)
		<-dctx.Done()
		aborted <- dctx.Err()
		return dctx.Err()
	})
	done := make(chan error, 1)
	go func() { done <- outbox.Relay(runCtx, l, deliver, outbox.WithPoll(10*time.Millisecond)) }()
	testwait.Recv(t, started, "the relay to hand the message out")
	cancel()
	if err := testwait.Recv(t, aborted, "the delivery under way to see its context end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the deliverer's context ended with %v, want context.Canceled", err)
	}
	if err := testwait.Recv(t, done, "Relay to return"); err != nil {
		t.Fatalf("Relay after cancel: %v, want nil", err)
	}
	msgs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(msgs) != 1 || msgs[0].Status != idemstore.OutboxPending || msgs[0].Attempts != 1 || msgs[0].NotBefore.After(time.Now()) {
		t.Fatalf("after the cancelled delivery: %+v, %v; want pending, due now, one attempt", msgs, err)
	}
	var c collect
	if res, err := outbox.RelayOnce(ctx, l, &c); err != nil || res.Delivered != 1 || c.Got[0].ID != id || c.Got[0].Attempt != 2 {
		t.Fatalf("the next relay: %+v, %v, %+v; want %s delivered again, attempt 2", res, err, c.Got, id)
	}
}

// TestPutHeaderNamesFoldCase: header names are case-insensitive, so a
// message that sets one twice in two cases is invalid: Put refuses it
// and nothing is queued (the old Put stored both, and the webhook sent
// one of them by map order).
func TestPutHeaderNamesFoldCase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	err := l.RunTx(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "pay", Headers: map[string]string{"X-Tenant": "a", "x-tenant": "b"}})
		return idem.Permanent(err) // retrying cannot help (as TestPutWhereNoOutbox's bodies)
	})
	if !errors.Is(err, outbox.ErrInvalidMessage) || !strings.Contains(err.Error(), `"X-Tenant" and "x-tenant"`) {
		t.Fatalf("Put with X-Tenant and x-tenant: %v; want ErrInvalidMessage naming both", err)
	}
	if msgs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{}); err != nil || len(msgs) != 0 {
		t.Fatalf("outbox after the refused Put: %+v, %v; want empty", msgs, err)
	}
}

// TestRelayWithStop: closing WithStop's channel while a delivery is under
// way does not abort it: it ends delivered, the message of another topic
// claimed with it is given back untouched (pending, 0 attempts, never
// handed out), and Relay returns nil.
func TestRelayWithStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	var ids []string
	err := l.RunTx(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, func(ctx context.Context, tx *sql.Tx) error {
		for _, topic := range []string{"slow", "other"} {
			id, err := outbox.Put(ctx, tx, outbox.Message{Topic: topic})
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
	stop, started, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var handed []string
	deliver := outbox.DeliverFunc(func(dctx context.Context, d outbox.Delivery) error {
		handed = append(handed, d.ID)
		if d.ID == ids[0] {
			close(started)
			<-release
		}
		return dctx.Err()
	})
	done := make(chan error, 1)
	go func() {
		done <- outbox.Relay(ctx, l, deliver, outbox.WithStop(stop), outbox.WithPoll(10*time.Millisecond))
	}()
	testwait.Recv(t, started, "the relay to hand out %s", ids[0])
	close(stop)
	close(release)
	if err := testwait.Recv(t, done, "Relay to return after its stop"); err != nil {
		t.Fatalf("Relay after its stop: %v, want nil", err)
	}
	msgs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{})
	if err != nil || len(msgs) != 2 || len(handed) != 1 ||
		msgs[0].Status != idemstore.OutboxDelivered || msgs[0].Attempts != 1 ||
		msgs[1].Status != idemstore.OutboxPending || msgs[1].Attempts != 0 || !msgs[1].LeaseUntil.IsZero() {
		t.Fatalf("after the stop: %+v, %v, handed out %q; want %s delivered and %s pending, never attempted", msgs, err, handed, ids[0], ids[1])
	}
}

// newRelay is outbox.NewRelay, which must succeed.
func newRelay(t *testing.T, s idem.Store, d outbox.Deliverer, opts ...outbox.Option) idem.Relay {
	t.Helper()
	r, err := outbox.NewRelay(s, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
