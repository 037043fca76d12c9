package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// DefaultConcurrency is how many deliveries a relay has in flight at most
// when [WithConcurrency] is not given: one, a message at a time, as a
// relay always delivered. More is opt-in because it changes the load a
// receiver sees (several requests at once), not the order of any topic.
const DefaultConcurrency = 1

// WithConcurrency lets the relay have up to n deliveries in flight at
// once (default [DefaultConcurrency]), each of a different topic: the
// topics of a claimed batch are delivered side by side, a topic's
// messages still one at a time and in order. A topic's next message is
// never handed out before the one before it is marked delivered (or
// parked): a failure still ends its topic's run, whose rest is given back
// untouched, and the next claim waits for every topic of the batch. With
// n above 1 a claim takes runs of at most WithBatch/n messages of a topic
// (at least 1), so that one busy topic does not fill the batch.
//
// [OnDelivery]'s function may then be called from n goroutines at once.
// n below 1 is an error matching [idem.ErrInvalidOption].
func WithConcurrency(n int) Option {
	return relayOption(func(c *relayConfig) error {
		if n < 1 {
			return invalidOption("outbox.WithConcurrency(%d): at least 1", n)
		}
		c.conc = n
		return nil
	})
}

// WithLimits paces the relay's deliveries by the limits ls, shared by
// every process that names them in their store (package limit): before
// each delivery the relay takes one start of every rate (limit.Rate) and
// a place of every "at once" limit (limit.AtOnce), held until the
// delivery's end is recorded. A delivery waiting for a limit is deferred,
// not failed: it counts no attempt, and its message keeps its place in its
// topic. If the relay stops while it waits, or the wait eats half of the
// message's lease, the message is given back untouched (due at once, its
// attempt not counted) and the start it took is lost (the limit errs on
// the side of fewer deliveries). A limit whose store fails ends the pass
// with its error, the messages not handed out given back the same way.
// The bound a rate keeps is the one package limit states for starts. A nil
// limit is an error matching [idem.ErrInvalidOption].
func WithLimits(ls ...idem.Limiter) Option {
	return relayOption(func(c *relayConfig) error {
		for i, l := range ls {
			if l == nil {
				return invalidOption("outbox.WithLimits: limit %d of %d is nil", i+1, len(ls))
			}
		}
		c.limits = append(c.limits[:len(c.limits):len(c.limits)], ls...)
		return nil
	})
}

// runLength is how many messages of one topic a claim takes at most.
func (c *relayConfig) runLength() int { return max(1, c.batch/c.conc) }

// topicRuns splits batch (in Seq order) into the runs of its topics, each
// in Seq order, the topics in the order of their first message.
func topicRuns(batch []idemstore.OutboxRecord) [][]idemstore.OutboxRecord {
	at := map[string]int{}
	var runs [][]idemstore.OutboxRecord
	for _, rec := range batch {
		i, ok := at[rec.Topic]
		if !ok {
			i = len(runs)
			at[rec.Topic] = i
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], rec)
	}
	return runs
}

// deliverBatch hands out the messages of batch, claimed at claimed (by
// the relay's clock, before the claim: the leases run at least until
// claimed plus the lease), on up to c.conc workers, a topic's run on one
// of them in order. It returns what they did, the messages not handed out
// (to give back) and the first store error, after which no worker hands
// out anything more.
func (c *relayConfig) deliverBatch(ctx context.Context, s idemstore.OutboxStore, d Deliverer, batch []idemstore.OutboxRecord,
	claimed time.Time) (Result, []idemstore.OutboxRecord, error) {
	runs := topicRuns(batch)
	jobs := make(chan []idemstore.OutboxRecord, len(runs))
	for _, r := range runs {
		jobs <- r
	}
	close(jobs)
	var (
		mu    sync.Mutex
		res   Result
		back  []idemstore.OutboxRecord
		first error
		wg    sync.WaitGroup
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	for range min(c.conc, len(runs)) {
		wg.Go(func() {
			for run := range jobs {
				var r Result
				rest, err := c.deliverRun(ctx, s, d, run, claimed, &r, failed)
				mu.Lock()
				res.add(r)
				back = append(back, rest...)
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res, back, first
}

func (r *Result) add(o Result) {
	r.Claimed += o.Claimed
	r.Delivered += o.Delivered
	r.Retrying += o.Retrying
	r.Parked += o.Parked
	r.Superseded += o.Superseded
	r.Pruned += o.Pruned
}

// deliverRun hands out run, one topic's messages in Seq order, one at a
// time: the first that does not end delivered or parked ends the run. A
// message is handed out only while the relay is not stopping, no other
// worker met a store error, the limits let it go, and at least half of
// its lease is left (claimed plus the lease, on the relay's clock): one
// that waited longer in the relay is given back and claimed again with a
// new lease, rather than delivered on a lease about to run out. It
// returns the messages not handed out.
func (c *relayConfig) deliverRun(ctx context.Context, s idemstore.OutboxStore, d Deliverer, run []idemstore.OutboxRecord,
	claimed time.Time, res *Result, failed func() bool) ([]idemstore.OutboxRecord, error) {
	for i, rec := range run {
		if c.stopping(ctx) || failed() {
			return run[i:], nil
		}
		held, release, err := c.takeLimits(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return run[i:], nil
			}
			return run[i:], err
		}
		if c.stopping(ctx) || c.clock.Now().After(claimed.Add(c.lease/2)) {
			release()
			if !c.stopping(ctx) {
				c.log(ctx, slog.LevelInfo, "outbox relay: half the lease gone before delivery; giving the message back",
					slog.String("id", rec.ID), slog.String("topic", rec.Topic))
			}
			return run[i:], nil
		}
		res.Claimed++
		outcome, err := c.deliver(held, s, d, rec, res)
		release()
		if err != nil {
			return run[i+1:], err
		}
		if outcome != DeliverySent && outcome != DeliveryParked {
			return run[i+1:], nil
		}
	}
	return nil, nil
}

// takeLimits waits until every limit of the relay lets one delivery go:
// a start of each rate that can still go (a start made void by the wait
// for another limit is taken again) and a place of each "at once" limit,
// held in the context it returns until release.
func (c *relayConfig) takeLimits(ctx context.Context) (context.Context, func(), error) {
	if len(c.limits) == 0 {
		return ctx, func() {}, nil
	}
	by := make([]time.Time, len(c.limits))
	for i := range by {
		by[i] = time.Unix(0, 1) // void: take one
	}
	for again := true; again; {
		again = false
		for i, l := range c.limits {
			if by[i].IsZero() || !time.Now().After(by[i]) {
				continue
			}
			b, err := l.TakeN(ctx, 1)
			if err != nil {
				return ctx, nil, fmt.Errorf("idem: outbox relay: limit %s: %w", l.Name(), err)
			}
			by[i], again = b, true
		}
	}
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	held := ctx
	for _, l := range c.limits {
		h, rel, err := l.Hold(held)
		if err != nil {
			release()
			return ctx, nil, fmt.Errorf("idem: outbox relay: limit %s: %w", l.Name(), err)
		}
		held = h
		releases = append(releases, rel)
	}
	return held, release, nil
}
