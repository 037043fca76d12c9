package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/limit"
	"github.com/idemgo/idem/outbox"
)

// putTopics queues per messages on each of topics topics ("t0", "t1",
// ...), payloads "0", "1", ... in each, one transaction per round.
func putTopics(t *testing.T, l *idem.Ledger, job string, topics, per int) {
	t.Helper()
	for p := range per {
		err := l.RunTx(context.Background(), idem.Key{Job: job, Period: fmt.Sprintf("p%d", p)}, func(ctx context.Context, tx *sql.Tx) error {
			for tp := range topics {
				if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t" + strconv.Itoa(tp), Payload: []byte(strconv.Itoa(p))}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// inOrder fails unless every topic of got (its payloads in arrival
// order) got exactly "0", "1", ... per-1.
func inOrder(t *testing.T, got map[string][]string, topics, per int) {
	t.Helper()
	var want []string
	for i := range per {
		want = append(want, strconv.Itoa(i))
	}
	if len(got) != topics {
		t.Fatalf("%d topics delivered, want %d: %v", len(got), topics, got)
	}
	for topic, ps := range got {
		if !slices.Equal(ps, want) {
			t.Fatalf("topic %s delivered %v, want %v", topic, ps, want)
		}
	}
}

// TestRelayRateLimit: a relay given a shared rate (limit.Rate, 4 a
// second, burst 1) with WithConcurrency(4) starts at most PerSecond +
// Burst deliveries in any second of the limit's clock (the ledger's: the
// system clock), as package limit bounds starts; a delivery that waited
// for the rate counts no attempt.
func TestRelayRateLimit(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	const topics, per = 4, 3
	putTopics(t, l, "rate", topics, per)
	rate, err := limit.NewRate(l, "webhook", 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	got := map[string][]string{}
	var attempts []int
	deliver := outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		now := time.Now() // the limit's clock
		mu.Lock()
		defer mu.Unlock()
		at = append(at, now)
		got[d.Topic] = append(got[d.Topic], string(d.Payload))
		attempts = append(attempts, d.Attempt)
		return nil
	})
	res, err := outbox.RelayOnce(context.Background(), l, deliver, outbox.WithConcurrency(4), outbox.WithLimits(rate))
	if err != nil || res.Delivered != topics*per || res.Claimed != topics*per {
		t.Fatalf("RelayOnce: %+v, %v; want %d delivered, as many handed out", res, err, topics*per)
	}
	mu.Lock()
	defer mu.Unlock()
	inOrder(t, got, topics, per)
	for i, a := range attempts {
		if a != 1 {
			t.Fatalf("delivery %d was attempt %d: a wait for the rate counted as an attempt", i, a)
		}
	}
	// PerSecond + Burst = 5, and package limit's slack (a quarter start)
	// adds none.
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for i, start := range at {
		n := 0
		for _, x := range at[i:] {
			if x.Before(start.Add(time.Second)) {
				n++
			}
		}
		if n > 5 {
			t.Fatalf("%d deliveries in the second from %s (at most 5 for 4/s, burst 1): %v", n, start.Format(time.StampMicro), at)
		}
	}
}

// TestRelayGivesBackHalfGoneLease: a message that waited in the relay
// (behind its topic's earlier message) until less than half of its lease
// was left is not handed out on it: it is given back, claimed again with
// a new lease, and delivered as its first attempt.
func TestRelayGivesBackHalfGoneLease(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	putTopics(t, l, "lease", 1, 3)
	clk := idemtest.NewClock(t0)
	const lease = time.Minute
	var left []time.Duration
	var attempts []int
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{ID: d.ID})
		if err != nil || len(recs) != 1 {
			return fmt.Errorf("list %s: %v, %d records", d.ID, err, len(recs))
		}
		left = append(left, recs[0].LeaseUntil.Sub(clk.Now()))
		attempts = append(attempts, d.Attempt)
		if len(left) == 1 {
			clk.Advance(lease * 6 / 10) // the first delivery takes most of the lease
		}
		return nil
	})
	res, err := outbox.RelayOnce(context.Background(), l, deliver, outbox.WithClock(clk), outbox.WithLease(lease), outbox.WithBatch(4))
	if err != nil || res.Delivered != 3 {
		t.Fatalf("RelayOnce: %+v, %v; want 3 delivered", res, err)
	}
	for i, d := range left {
		if d < lease/2 || attempts[i] != 1 {
			t.Fatalf("delivery %d handed out with %v of its %v lease left, attempt %d; want at least half, first attempt (all: %v, %v)",
				i+1, d, lease, attempts[i], left, attempts)
		}
	}
}

// TestBadRelayConcurrencyOptions: WithConcurrency below 1 and a nil limit
// are ErrInvalidOption.
func TestBadRelayConcurrencyOptions(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	nop := outbox.DeliverFunc(func(context.Context, outbox.Delivery) error { return nil })
	for _, o := range []outbox.Option{outbox.WithConcurrency(0), outbox.WithLimits(nil)} {
		if _, err := outbox.NewRelay(l, nop, o); !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("NewRelay: %v; want ErrInvalidOption", err)
		}
	}
}

// TestSchedulerRelayConcurrentAndPaced: a Scheduler's relay (AddRelay)
// with WithConcurrency(4) and a shared rate delivers what an AddTx job
// queued on four topics, more than one delivery in flight at once (a
// barrier in the receiver holds the first two until both are), at most
// four, every topic in order.
func TestSchedulerRelayConcurrentAndPaced(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	clk := idemtest.NewClock(t0)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	const topics, per = 4, 3
	err := idem.AddTx(s, "settle", idem.Daily(time.UTC), func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		for i := range per {
			for tp := range topics {
				if _, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t" + strconv.Itoa(tp), Payload: []byte(strconv.Itoa(i))}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rate, err := limit.NewRate(l, "webhook", 1000, 10)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu             sync.Mutex
		got            = map[string][]string{}
		n              int
		inFlight, most atomic.Int64
		both           = make(chan struct{})
		arrived        atomic.Int64
	)
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		if k := arrived.Add(1); k <= 2 {
			if k == 2 {
				close(both)
			}
			select { // the barrier: the first two wait for each other
			case <-both:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		got[d.Topic] = append(got[d.Topic], string(d.Payload))
		n++
		return nil
	})
	if err := s.AddRelay("notify", newRelay(t, l, deliver, outbox.WithConcurrency(4), outbox.WithLimits(rate))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testwait.Recv(t, both, "two deliveries in flight at once")
	testwait.Until(t, func() bool {
		mu.Lock()
		ok := n == topics*per
		mu.Unlock()
		if !ok {
			clk.Advance(outbox.DefaultPoll)
		}
		return ok
	}, "the relay to deliver the %d messages", topics*per)
	cancel()
	testwait.Recv(t, done, "the Scheduler to stop")
	if m := most.Load(); m > 4 || m < 2 {
		t.Fatalf("%d deliveries in flight at most; want 2 to 4", m)
	}
	mu.Lock()
	defer mu.Unlock()
	inOrder(t, got, topics, per)
}

// fakeLimiter is an idem.Limiter whose TakeN and Hold the test scripts.
type fakeLimiter struct {
	take func(ctx context.Context) error
	hold func(ctx context.Context) (context.Context, func(), error)
}

func (f *fakeLimiter) Name() string { return "fake" }

func (f *fakeLimiter) TakeN(ctx context.Context, _ int) (time.Time, error) {
	if f.take == nil {
		return time.Time{}, nil
	}
	return time.Time{}, f.take(ctx)
}

func (f *fakeLimiter) Hold(ctx context.Context) (context.Context, func(), error) {
	if f.hold == nil {
		return ctx, func() {}, nil
	}
	return f.hold(ctx)
}

// untouched fails unless every message of l is pending, not leased, and
// counts no attempt.
func untouched(t *testing.T, l *idem.Ledger) {
	t.Helper()
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil || len(recs) == 0 {
		t.Fatalf("ListOutbox: %d, %v", len(recs), err)
	}
	for _, r := range recs {
		if r.Status != idemstore.OutboxPending || r.Attempts != 0 || r.LeaseUntil.After(time.Now()) {
			t.Fatalf("message %s after a deferral: %s, %d attempts, leased until %v; want pending, 0, not leased", r.ID, r.Status, r.Attempts, r.LeaseUntil)
		}
	}
}

// TestRelayLimitDeferral: a limit whose store fails ends the pass with
// its error, naming the limit; a relay stopped (its context cancelled)
// while it waits for a limit ends quietly; either way nothing was handed
// out and every message is given back untouched, no attempt counted.
func TestRelayLimitDeferral(t *testing.T) {
	t.Parallel()
	nope := outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		return fmt.Errorf("delivered %s although the limit did not let it go", d.ID)
	})
	t.Run("store fails", func(t *testing.T) {
		l := openLedger(t, t.TempDir())
		putTopics(t, l, "limitdown", 3, 2)
		down := errors.New("limit store down")
		res, err := outbox.RelayOnce(context.Background(), l, nope, outbox.WithConcurrency(2),
			outbox.WithLimits(&fakeLimiter{take: func(context.Context) error { return down }}))
		if !errors.Is(err, down) || !strings.Contains(err.Error(), "limit fake") || res.Claimed != 0 {
			t.Fatalf("RelayOnce: %+v, %v; want the limit's error, naming it, nothing handed out", res, err)
		}
		untouched(t, l)
	})
	t.Run("stopped while waiting", func(t *testing.T) {
		l := openLedger(t, t.TempDir())
		putTopics(t, l, "limitwait", 3, 2)
		waiting := make(chan struct{}, 8)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := outbox.RelayOnce(ctx, l, nope, outbox.WithConcurrency(2), outbox.WithLimits(&fakeLimiter{take: func(ctx context.Context) error {
				waiting <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}}))
			done <- err
		}()
		testwait.Recv(t, waiting, "the relay to wait for the limit")
		cancel()
		if err := testwait.Recv(t, done, "RelayOnce to end after its context"); !errors.Is(err, context.Canceled) {
			t.Fatalf("RelayOnce: %v; want context.Canceled", err)
		}
		untouched(t, l)
	})
}

type heldKey struct{}

// TestRelayHoldsAPlace: an "at once" limit's place is held for each
// delivery: the deliverer's context is the one Hold returned, and the
// place is released after the delivery's end was recorded.
func TestRelayHoldsAPlace(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	putTopics(t, l, "hold", 2, 2)
	var mu sync.Mutex
	var problems []string
	held, released := 0, 0
	lim := &fakeLimiter{hold: func(ctx context.Context) (context.Context, func(), error) {
		mu.Lock()
		held++
		mu.Unlock()
		ctx = context.WithValue(ctx, heldKey{}, true)
		return ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			released++
			recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{Status: idemstore.OutboxDelivered})
			if err != nil || len(recs) < released {
				problems = append(problems, fmt.Sprintf("release %d with %d messages marked delivered (%v)", released, len(recs), err))
			}
		}, nil
	}}
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		if ctx.Value(heldKey{}) == nil {
			mu.Lock()
			problems = append(problems, d.ID+": the deliverer's context is not the held one")
			mu.Unlock()
		}
		return nil
	})
	res, err := outbox.RelayOnce(context.Background(), l, deliver, outbox.WithLimits(lim))
	mu.Lock()
	defer mu.Unlock()
	if err != nil || res.Delivered != 4 || held != 4 || released != 4 || len(problems) > 0 {
		t.Fatalf("RelayOnce: %+v, %v; places held %d, released %d (want 4 each); %v", res, err, held, released, problems)
	}
}

// TestRelayConcurrencyShortensRuns: with WithConcurrency(4) and
// WithBatch(8), a claim takes at most 8/4 = 2 messages of one topic, so
// that one busy topic does not fill the batch.
func TestRelayConcurrencyShortensRuns(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	putTopics(t, l, "runs", 1, 10)
	var most int
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{Status: idemstore.OutboxPending})
		if err != nil {
			return err
		}
		leased := 0
		for _, r := range recs {
			if r.LeaseUntil.After(time.Now()) {
				leased++
			}
		}
		most = max(most, leased)
		return nil
	})
	res, err := outbox.RelayOnce(context.Background(), l, deliver, outbox.WithConcurrency(4), outbox.WithBatch(8))
	if err != nil || res.Delivered != 10 || most != 2 {
		t.Fatalf("RelayOnce: %+v, %v; at most %d messages of the topic leased at once, want 2", res, err, most)
	}
}
