package idemtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
)

// slowFlakyReceiver is TestOutbox's deliverer under outbox.WithConcurrency:
// it holds no lock while it works, so deliveries overlap; it counts those
// in flight (the most at once in max), fails some at random, takes a
// moment over each, and holds the first deliveries until `meet` of them
// are in flight at once (a barrier, not a timing: met stays false if
// they never were).
type slowFlakyReceiver struct {
	inFlight, max atomic.Int64

	meet    int
	arrived chan struct{} // one send per delivery held at the barrier
	open    chan struct{} // closed when meet deliveries were in flight
	waitMax time.Duration
	met     atomic.Bool
	once    sync.Once

	mu   sync.Mutex
	rng  *rand.Rand
	log  []outbox.Delivery
	ok   map[string][]int // per topic, the accepted messages' numbers, in order
	held int
}

func newSlowFlakyReceiver(meet int, waitMax time.Duration) *slowFlakyReceiver {
	return &slowFlakyReceiver{meet: meet, arrived: make(chan struct{}, meet), open: make(chan struct{}),
		waitMax: waitMax, rng: rand.New(rand.NewPCG(7, 48)), ok: map[string][]int{}}
}

func (r *slowFlakyReceiver) Deliver(_ context.Context, d outbox.Delivery) error {
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for m := r.max.Load(); n > m && !r.max.CompareAndSwap(m, n); m = r.max.Load() {
	}
	r.mu.Lock()
	r.log = append(r.log, d)
	hold := r.held < r.meet
	r.held++
	fail := r.rng.IntN(3) == 0
	r.mu.Unlock()
	if hold {
		r.barrier()
	}
	time.Sleep(time.Millisecond) // slow: the others run meanwhile
	if fail {
		return errors.New("receiver flaked")
	}
	_, num, _ := strings.Cut(string(d.Payload), "#")
	i, _ := strconv.Atoi(num)
	r.mu.Lock()
	r.ok[d.Topic] = append(r.ok[d.Topic], i)
	r.mu.Unlock()
	return nil
}

// barrier holds a delivery until meet of them are held at once, or
// waitMax has passed (then the barrier opens for good, unmet).
func (r *slowFlakyReceiver) barrier() {
	r.arrived <- struct{}{}
	r.once.Do(func() {
		<-r.arrived // the first's own
		go func() {
			deadline := time.After(r.waitMax)
			for range r.meet - 1 {
				select {
				case <-r.arrived:
				case <-deadline:
					close(r.open)
					return
				}
			}
			r.met.Store(true)
			close(r.open)
		}()
	})
	<-r.open
}

func (r *slowFlakyReceiver) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, nums := range r.ok {
		n += len(nums)
	}
	return n
}

// testOutboxConcurrentTopics: with outbox.WithConcurrency(n) a relay has
// at most n deliveries in flight, more than one when there are topics to
// share, and every topic's messages are still accepted exactly in order,
// each once, through a receiver that fails a third of the attempts.
func testOutboxConcurrentTopics[Tx any](t *testing.T, s outboxLedger[Tx], clk *Clock) {
	ctx := context.Background()
	const topics, per = 4, 6
	for p := range per {
		var msgs []outbox.Message
		for tp := range topics {
			msgs = append(msgs, msg("t"+strconv.Itoa(tp), p))
		}
		if _, err := putTx(ctx, s, idem.Key{Job: "concurrent", Period: fmt.Sprintf("p%d", p)}, nil, msgs, idem.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
	}
	// The barrier's wait is the test's only wait on real time: it ends
	// early when met, and the test fails if it was not.
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("concurrency%d", n), func(t *testing.T) {
			if n == 4 {
				// A fresh outbox: the same messages on new topics.
				for p := range per {
					var msgs []outbox.Message
					for tp := range topics {
						msgs = append(msgs, msg("u"+strconv.Itoa(tp), p))
					}
					if _, err := putTx(ctx, s, idem.Key{Job: "concurrent4", Period: fmt.Sprintf("p%d", p)}, nil, msgs, idem.WithClock(clk)); err != nil {
						t.Fatal(err)
					}
				}
			}
			r := newSlowFlakyReceiver(2, min(30*time.Second, time.Duration(float64(testwait.Limit(t))*0.5)))
			opts := []outbox.Option{outbox.WithClock(clk), outbox.WithBackoff(idem.Constant(time.Second)), outbox.WithBatch(8),
				outbox.WithConcurrency(n)}
			for round := 0; round < 200 && r.accepted() < topics*per; round++ {
				relayOnce(t, s, r, opts...)
				clk.Advance(time.Second)
			}
			if got := r.accepted(); got != topics*per {
				t.Fatalf("%d of %d messages accepted in 200 passes", got, topics*per)
			}
			if m := r.max.Load(); m > int64(n) {
				t.Fatalf("%d deliveries in flight at once with WithConcurrency(%d)", m, n)
			}
			if !r.met.Load() {
				t.Fatalf("two deliveries were never in flight at once with WithConcurrency(%d) and %d topics (the receiver's barrier waited for them)", n, topics)
			}
			want := make([]int, per)
			for i := range want {
				want[i] = i
			}
			for topic, nums := range r.ok {
				if !slices.Equal(nums, want) {
					t.Fatalf("topic %s accepted %v, want %v: in order, each once", topic, nums, want)
				}
			}
			checkOrder(t, s, r.log)
		})
	}
}
