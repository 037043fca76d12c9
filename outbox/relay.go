package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/storeof"
)

// Delivery is one attempt to deliver an outbox message: what a
// [Deliverer] gets.
type Delivery struct {
	// ID is the message's stable id ([Put]): the same at every attempt,
	// in every relay. A receiver dedupes by it: delivery is at least once.
	ID      string
	Topic   string
	Payload []byte
	Headers map[string]string
	// Attempt counts the attempts handed out for this message, 1 for the
	// first (a relay that died while delivering counts one too).
	Attempt int
	// Key (and Item, in EachTx) is the key whose transaction queued the
	// message; Created is when, by the run's clock.
	Key     idem.Key
	Item    string
	Created time.Time
}

// Deliverer delivers outbox messages: the relay calls Deliver for each
// message that is due. A nil error means delivered (the relay marks it
// so); an error, a failed attempt, retried after the relay's backoff, or
// at once parked when it is [idem.Permanent] or the backoff gives up. Deliver
// may be called again for a message it already delivered (the relay died
// before marking it, or its lease ran out): make the receiver dedupe by
// Delivery.ID. ctx ends when the message's lease does (on the system
// clock; see [WithLease]). A Deliver that
// panics fails the attempt (the relay goes on with the other messages).
type Deliverer interface {
	Deliver(ctx context.Context, d Delivery) error
}

// DeliverFunc adapts a function to a [Deliverer].
type DeliverFunc func(ctx context.Context, d Delivery) error

// Deliver calls f.
func (f DeliverFunc) Deliver(ctx context.Context, d Delivery) error { return f(ctx, d) }

// DeliveryOutcome is how one delivery attempt ended.
type DeliveryOutcome int

// The outcomes of a delivery attempt.
const (
	DeliverySent       DeliveryOutcome = iota + 1 // the deliverer accepted it; marked delivered
	DeliveryRetrying                              // it failed; due again at NotBefore
	DeliveryParked                                // it failed for good (Permanent, or the backoff gave up): parked
	DeliverySuperseded                            // its end was refused: its lease ran out and another relay took it, or it was dropped
)

// String returns the outcome's name: delivered, retrying, parked or
// superseded.
func (o DeliveryOutcome) String() string {
	switch o {
	case DeliverySent:
		return "delivered"
	case DeliveryRetrying:
		return "retrying"
	case DeliveryParked:
		return "parked"
	case DeliverySuperseded:
		return "superseded"
	}
	return fmt.Sprintf("DeliveryOutcome(%d)", int(o))
}

// DeliveryResult is what [OnDelivery] gets for every delivery attempt.
// When recording the attempt's end failed, Err joins the store's error
// (the message is handed out again after its lease).
type DeliveryResult struct {
	Delivery
	Outcome   DeliveryOutcome
	Err       error         // the deliverer's error (nil when delivered), or the store's
	NotBefore time.Time     // Retrying: the next attempt's earliest time
	Duration  time.Duration // how long Deliver took, by the relay's clock
}

// Result counts what one pass of the relay ([RelayOnce]) did.
type Result struct {
	Claimed    int   // delivery attempts handed out
	Delivered  int   // marked delivered
	Retrying   int   // failed; due again later
	Parked     int   // failed for good
	Superseded int   // ends refused: another relay took the message over, or it was dropped
	Pruned     int64 // delivered messages deleted after the retention
}

// An Option configures [Relay], [RelayOnce] and a Scheduler's relay
// ([idem.Scheduler.AddRelay]).
type Option interface{ applyRelay(*relayConfig) error }

type relayOption func(*relayConfig) error

func (o relayOption) applyRelay(c *relayConfig) error { return o(c) }

// Defaults of the relay.
const (
	DefaultBatch = 32          // messages a claim takes at most (WithBatch)
	DefaultLease = time.Minute // how long a claim holds a message (WithLease)
	DefaultPoll  = time.Second // the wait between passes that found nothing due (WithPoll)
)

type relayConfig struct {
	batch     int
	lease     time.Duration
	poll      time.Duration
	retention time.Duration // 0: keep delivered messages
	backoff   idem.Backoff
	clock     idem.Clock
	logger    *slog.Logger
	owner     string
	onResult  func(DeliveryResult)
	onPass    func(Result, error)
	stop      <-chan struct{} // WithStop; nil: never
	conc      int             // WithConcurrency
	limits    []idem.Limiter  // WithLimits
	err       error
}

func newRelayConfig(opts []Option) *relayConfig {
	c := &relayConfig{batch: DefaultBatch, lease: DefaultLease, poll: DefaultPoll,
		backoff: idem.DefaultBackoff(), clock: idem.SystemClock(), owner: idemstore.Owner(), conc: DefaultConcurrency}
	for i, o := range opts {
		var err error
		if o == nil {
			err = invalidOption("option %d of %d is nil", i+1, len(opts))
		} else {
			err = o.applyRelay(c)
		}
		if err != nil && c.err == nil {
			c.err = fmt.Errorf("idem: relay: %w", err)
		}
	}
	return c
}

// WithBatch sets how many messages one claim takes at most (default
// [DefaultBatch]). On a store that can give claims back (the SQLite and
// Postgres ledgers) a claim takes runs of a topic's messages, handed out
// one at a time in order; on another, at most one message per topic. n
// below 1 is an error matching [idem.ErrInvalidOption].
func WithBatch(n int) Option {
	return relayOption(func(c *relayConfig) error {
		if n < 1 {
			return invalidOption("outbox.WithBatch(%d): at least 1", n)
		}
		c.batch = n
		return nil
	})
}

// WithLease sets how long a claim holds a message (default
// [DefaultLease]): on the system clock the deliverer's context ends
// with it (with [WithClock], it is no deadline on that context), and
// after it another relay may deliver the message again. Make it much longer than a
// delivery takes. A message is handed out only while at least half of its
// lease is left (counted on the relay's clock from before its claim): one
// that waited longer in the relay, behind its topic's earlier messages or
// for [WithLimits], is given back untouched (its attempt not counted) and
// claimed again with a new lease. Below [idem.MinLease] it is an error matching
// [idem.ErrInvalidOption].
func WithLease(d time.Duration) Option {
	return relayOption(func(c *relayConfig) error {
		if d < idem.MinLease {
			return invalidOption("outbox.WithLease(%v): at least %v", d, idem.MinLease)
		}
		c.lease = d
		return nil
	})
}

// WithPoll sets how long [Relay] waits, when nothing is due, before it
// looks again (default [DefaultPoll]). Not positive: an error
// matching [idem.ErrInvalidOption].
func WithPoll(d time.Duration) Option {
	return relayOption(func(c *relayConfig) error {
		if d <= 0 {
			return invalidOption("outbox.WithPoll(%v): must be positive", d)
		}
		c.poll = d
		return nil
	})
}

// WithRetention makes each pass delete the messages delivered more than
// d ago (by the relay's clock). By default delivered messages are kept.
// Not positive: an error matching [idem.ErrInvalidOption].
func WithRetention(d time.Duration) Option {
	return relayOption(func(c *relayConfig) error {
		if d <= 0 {
			return invalidOption("outbox.WithRetention(%v): must be positive", d)
		}
		c.retention = d
		return nil
	})
}

// WithBackoff sets the retry policy of failed deliveries (default
// [idem.DefaultBackoff]): after the n-th failed attempt of a message it is due
// again after b.Next(n); when b gives up it is parked. The attempt count
// and the next time are kept in the store. A nil or invalid b is an error
// matching [idem.ErrInvalidOption].
func WithBackoff(b idem.Backoff) Option {
	return relayOption(func(c *relayConfig) error {
		if err := idem.CheckBackoff(b); err != nil {
			return invalidOption("outbox.WithBackoff: %s", err)
		}
		c.backoff = b
		return nil
	})
}

// WithClock sets the relay's clock (leases, backoff, waits, retention;
// default the system clock). A store that keeps leases and backoff on its
// own clock (pgledger: the server's) takes only durations from it. A nil
// clk is an error matching [idem.ErrInvalidOption].
func WithClock(clk idem.Clock) Option {
	return relayOption(func(c *relayConfig) error {
		if clk == nil {
			return invalidOption("outbox.WithClock(nil)")
		}
		c.clock = clk
		return nil
	})
}

// WithLogger logs failed deliveries, parked messages and store errors to
// l (default: nothing).
func WithLogger(l *slog.Logger) Option {
	return relayOption(func(c *relayConfig) error { c.logger = l; return nil })
}

// WithOwner names the relay in the store's records (default
// idemstore.Owner(): host, pid and what proves the process's death). An
// empty name is an error matching [idem.ErrInvalidOption].
func WithOwner(name string) Option {
	return relayOption(func(c *relayConfig) error {
		if name == "" {
			return invalidOption("outbox.WithOwner(\"\")")
		}
		c.owner = name
		return nil
	})
}

// OnDelivery calls f with the result of every delivery attempt, after its
// end was recorded (or refused), for metrics and tests. f runs on the
// goroutine that delivered (with [WithConcurrency] above 1, several at
// once): keep it short.
func OnDelivery(f func(DeliveryResult)) Option {
	return relayOption(func(c *relayConfig) error { c.onResult = f; return nil })
}

// RelayOnce delivers the outbox messages of s that are due, with d, until
// none is due: it claims a batch (the first pending message of each topic,
// and on the SQLite and Postgres ledgers the ones right after it, leased
// to this relay with a fencing token), calls d for each in its topic's
// order (the topics one after another, or side by side with
// [WithConcurrency]), records
// each end (fenced: an end whose lease another relay took over is
// refused), and claims again. Then, with [WithRetention], it prunes the
// delivered messages older than the retention.
//
// What it promises: a message whose transaction committed is delivered at
// least once, unless an operator drops it or it parks; a rolled-back
// transaction's message never is; a message is not handed out while an
// earlier message of its topic is pending. What it does NOT promise:
// delivery exactly once. A relay that dies (or stalls past its lease)
// between Deliver and the delivered mark delivers the message again, with
// the same id: the receiver must dedupe by Delivery.ID.
//
// The store keeps the outbox: behind s there must be an
// [idemstore.OutboxStore] (idem.Ledger and the Postgres ledgers have one);
// another store is an error naming it, before anything is claimed.
//
// It returns what it did, and the first store error (or ctx's, if ctx
// ended first), which ends the pass (after a store error, a message
// claimed and not ended is delivered again after its lease). When ctx
// ends, or [WithStop]'s channel closes, the pass hands out nothing more
// and gives back the messages it claimed and has not handed out, their
// attempts not counted (see [Relay] for the delivery under way).
// A message that fails is due again after the backoff's delay: with
// delays shorter than a pass, and a backoff that never gives up, a pass
// over a receiver that keeps failing does not end (give such a backoff a
// cap on attempts, [idem.MaxAttempts], as idem.DefaultBackoff has).
func RelayOnce(ctx context.Context, s idem.Store, d Deliverer, opts ...Option) (Result, error) {
	if s == nil || d == nil {
		panic("outbox: RelayOnce needs a store and a deliverer")
	}
	c := newRelayConfig(opts)
	if c.err != nil {
		return Result{}, c.err
	}
	ob, err := outboxOf("outbox.RelayOnce", s)
	if err != nil {
		return Result{}, err
	}
	res, err := c.once(ctx, ob, d)
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx) // the pass stopped before nothing was due
	}
	return res, err
}

// Relay runs [RelayOnce] passes until ctx ends, waiting [WithPoll]
// between passes that found nothing due, and then returns nil. A store
// error is logged and the relay goes on after the poll interval. Run
// several relays (processes, or the Postgres ledger's SKIP LOCKED claims
// across hosts) to share the work: each message is held by one at a time.
// An invalid option is returned at once.
//
// Cancelling ctx aborts the delivery under way: the deliverer's context
// derives from ctx, and the attempt is recorded as failed, due again at
// once, so the next relay delivers it again, even if the receiver had
// applied it. That attempt counts (toward [WithBackoff]'s last one): it
// was handed out, and may have reached the receiver. The messages claimed
// with it and not yet handed out are given back as they were, due at
// once, their attempts not counted: a message that was never handed out
// never moves toward parking, however often relays are stopped. To stop
// without that duplicate, close the channel given to [WithStop] instead
// (as 'idem outbox relay' does on SIGTERM): the delivery under way
// finishes (its own deadline is the lease) and is recorded, and the rest
// is given back the same way.
func Relay(ctx context.Context, s idem.Store, d Deliverer, opts ...Option) error {
	if s == nil || d == nil {
		panic("outbox: Relay needs a store and a deliverer")
	}
	c := newRelayConfig(opts)
	if c.err != nil {
		return c.err
	}
	ob, err := outboxOf("outbox.Relay", s)
	if err != nil {
		return err
	}
	c.loop(ctx, ob, d)
	return nil
}

// loop runs passes until ctx ends; after each, onPass (if set) gets its
// result and error.
func (c *relayConfig) loop(ctx context.Context, s idemstore.OutboxStore, d Deliverer) {
	wait := ctx // the waits between passes end when the relay stops
	if c.stop != nil {
		var cancel context.CancelFunc
		wait, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-wait.Done():
			}
		}()
	}
	for !c.stopping(ctx) {
		res, err := c.once(ctx, s, d)
		if c.onPass != nil {
			c.onPass(res, err)
		}
		if err != nil && ctx.Err() == nil {
			c.log(ctx, slog.LevelWarn, "outbox relay: store error; trying again", slog.Any("error", err))
		}
		if sleep(wait, c.clock, c.poll) != nil {
			return
		}
	}
}

func (c *relayConfig) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if c.logger != nil {
		c.logger.LogAttrs(ctx, level, msg, attrs...)
	}
}

// once is one pass. On a store that can give claims back
// (idemstore.OutboxReleaser), a claim takes runs of a topic's messages
// (OutboxClaimRequest.Run): they are handed out in Seq order, and the
// first one that does not end delivered or parked ends its topic's run,
// whose rest is given back untouched (not handed out, its attempt not
// counted), so that no message is handed out before the ones before it.
// When the relay stops (ctx ends, or WithStop's channel closes), the
// messages of the batch not yet handed out are given back the same way
// (giveBack): one mechanism for a context's end and for a graceful stop.
// The topics of a batch are delivered side by side by up to
// WithConcurrency workers (deliverBatch), and the next claim waits for
// them all.
func (c *relayConfig) once(ctx context.Context, s idemstore.OutboxStore, d Deliverer) (res Result, err error) {
	req := idemstore.OutboxClaimRequest{N: c.batch, Owner: c.owner, Lease: c.lease}
	if _, ok := s.(idemstore.OutboxReleaser); ok {
		req.Run = c.runLength()
	}
	for !c.stopping(ctx) {
		req.Now = c.clock.Now()
		batch, err := s.ClaimOutbox(ctx, req)
		if err != nil {
			return res, err
		}
		if len(batch) == 0 {
			break
		}
		r, back, err := c.deliverBatch(ctx, s, d, batch, req.Now)
		res.add(r)
		if err != nil {
			// Best effort: what was not handed out is due again after
			// its lease anyway, by this relay or another.
			_ = c.giveBack(ctx, s, back)
			return res, err
		}
		if err := c.giveBack(ctx, s, back); err != nil {
			return res, err // the messages are due again after their lease
		}
	}
	if c.retention > 0 && !c.stopping(ctx) {
		n, err := s.PruneOutbox(ctx, c.clock.Now().Add(-c.retention))
		res.Pruned += n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// stopping reports whether the relay must hand out nothing more: ctx
// ended, or the channel of WithStop is closed.
func (c *relayConfig) stopping(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// giveBack ends the claims of recs, which were never handed out: on a
// store that can give claims back (idemstore.OutboxReleaser) as if they
// had not been taken (due at once, their attempts not counted); on
// another, as failed attempts due again at once, without calling the
// deliverer.
func (c *relayConfig) giveBack(ctx context.Context, s idemstore.OutboxStore, recs []idemstore.OutboxRecord) error {
	if len(recs) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx) // the relay may be stopping: this is its last write
	if rs, ok := s.(idemstore.OutboxReleaser); ok {
		claims := make([]idemstore.OutboxClaimed, len(recs))
		for i, rec := range recs {
			claims[i] = idemstore.OutboxClaimed{ID: rec.ID, Token: rec.Token}
		}
		return rs.ReleaseOutbox(ctx, claims)
	}
	now := c.clock.Now()
	for _, rec := range recs {
		f := idemstore.OutboxFailure{Now: now, NotBefore: now, Error: "not handed out: the relay stopped"}
		if err := s.FailOutbox(ctx, rec.ID, rec.Token, f); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
			return err
		}
	}
	return nil
}

// deliver hands rec to d and records how it ended.
func (c *relayConfig) deliver(ctx context.Context, s idemstore.OutboxStore, d Deliverer, rec idemstore.OutboxRecord, res *Result) (DeliveryOutcome, error) {
	dl := Delivery{ID: rec.ID, Topic: rec.Topic, Payload: rec.Payload, Headers: rec.Headers, Attempt: rec.Attempts,
		Key: rec.Key, Item: rec.Item, Created: rec.Created}
	sctx, endSpan := idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanDelivery, Key: rec.Key, Headers: rec.Headers,
		Attrs: []idemstore.Attr{{Key: idemstore.AttrMessage, Value: rec.ID}, {Key: idemstore.AttrTopic, Value: rec.Topic},
			{Key: idemstore.AttrAttempt, Value: rec.Attempts}}})
	dl.Headers = idemstore.InjectSpan(sctx, dl.Headers, true) // the delivery's trace context, for the receiver
	dctx, cancel := sctx, context.CancelFunc(func() {})
	if c.clock == idem.SystemClock() {
		dctx, cancel = context.WithDeadline(sctx, rec.LeaseUntil)
	}
	start := c.clock.Now()
	derr := callDeliver(dctx, d, dl)
	cancel()
	now := c.clock.Now()
	r := DeliveryResult{Delivery: dl, Err: derr, Duration: now.Sub(start)}
	var serr error
	switch {
	case derr == nil:
		r.Outcome = DeliverySent
		serr = s.DeliveredOutbox(context.WithoutCancel(ctx), rec.ID, rec.Token, now)
	default:
		f := idemstore.OutboxFailure{Now: now, Error: derr.Error()}
		delay, ok := c.backoff.Next(rec.Attempts)
		switch {
		case ctx.Err() != nil:
			// The relay is stopping: the message is due again at once,
			// for the next relay.
			f.NotBefore, r.Outcome, r.NotBefore = now, DeliveryRetrying, now
		case idem.IsPermanent(derr) || !ok:
			f.Park, r.Outcome = true, DeliveryParked
		default:
			f.NotBefore, r.Outcome, r.NotBefore = now.Add(delay), DeliveryRetrying, now.Add(delay)
		}
		serr = s.FailOutbox(context.WithoutCancel(ctx), rec.ID, rec.Token, f)
	}
	switch {
	case errors.Is(serr, idem.ErrLeaseLost):
		r.Outcome = DeliverySuperseded
		res.Superseded++
		c.log(ctx, slog.LevelWarn, "outbox relay: end refused", slog.String("id", rec.ID), slog.Any("error", serr))
		serr = nil
	case serr != nil:
		r.Err = errors.Join(derr, serr)
	case r.Outcome == DeliverySent:
		res.Delivered++
	case r.Outcome == DeliveryRetrying:
		res.Retrying++
		c.log(ctx, slog.LevelWarn, "outbox relay: delivery failed; will retry", slog.String("id", rec.ID), slog.String("topic", rec.Topic),
			slog.Int("attempt", rec.Attempts), slog.Time("not_before", r.NotBefore), slog.Any("error", derr))
	case r.Outcome == DeliveryParked:
		res.Parked++
		c.log(ctx, slog.LevelError, "outbox relay: message parked", slog.String("id", rec.ID), slog.String("topic", rec.Topic),
			slog.Int("attempt", rec.Attempts), slog.Any("error", derr))
	}
	endSpan(idemstore.SpanEnd{Outcome: r.Outcome.String(), Err: r.Err})
	if c.onResult != nil {
		c.onResult(r)
	}
	return r.Outcome, serr
}

// callDeliver calls d, turning a panic into an error: a deliverer that
// panics on one message must not stop the relay for every other.
func callDeliver(ctx context.Context, d Deliverer, dl Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox: deliverer panicked: %v", p)
		}
	}()
	return d.Deliver(ctx, dl)
}

// OnPass calls f after each pass of [Relay] (a Scheduler's relay too) with
// what it did and its store error, if any; f runs on the relay's
// goroutine: keep it short.
func OnPass(f func(Result, error)) Option {
	return relayOption(func(c *relayConfig) error {
		if f == nil {
			return invalidOption("outbox.OnPass(nil): no function to call")
		}
		c.onPass = f
		return nil
	})
}

// WithStop stops the relay gracefully when stop is closed: it hands out
// nothing more, lets the delivery under way finish (its deadline is the
// message's lease) and records its end as usual, gives the messages it
// claimed and has not handed out back as they were (due at once, their
// attempts not counted), and then [Relay] returns nil ([RelayOnce] ends
// its pass). Unlike cancelling the relay's context, it does not abort the
// delivery under way, so that message is not delivered twice.
// 'idem outbox relay' stops so on SIGTERM. A nil stop is an error
// matching [idem.ErrInvalidOption].
func WithStop(stop <-chan struct{}) Option {
	return relayOption(func(c *relayConfig) error {
		if stop == nil {
			return invalidOption("outbox.WithStop(nil): no channel to wait for")
		}
		c.stop = stop
		return nil
	})
}

// NewRelay is a relay of s's outbox to d with opts, for a Scheduler
// (idem.Scheduler.AddRelay): it runs [Relay]'s passes while the Scheduler
// runs, with the Scheduler's logger unless opts give [WithLogger], and
// reports each pass to the Scheduler's status (after [OnPass]'s f, if
// given). Its options and store are checked now: an invalid option is an
// error matching [idem.ErrInvalidOption]; a store with no outbox is an
// error naming it.
func NewRelay(s idem.Store, d Deliverer, opts ...Option) (idem.Relay, error) {
	if s == nil || d == nil {
		panic("outbox: NewRelay needs a store and a deliverer")
	}
	c := newRelayConfig(opts)
	if c.err != nil {
		return nil, c.err
	}
	ob, err := outboxOf("outbox.NewRelay", s)
	if err != nil {
		return nil, err
	}
	return &schedRelay{c: c, s: ob, d: d}, nil
}

// schedRelay is a Scheduler's relay (NewRelay).
type schedRelay struct {
	c *relayConfig
	s idemstore.OutboxStore
	d Deliverer
}

// RunRelay implements [idem.Relay].
func (r *schedRelay) RunRelay(ctx context.Context, logger *slog.Logger, pass func(idem.RelayPass, error)) {
	c := *r.c // this run's: the logger and the report are the Scheduler's
	if c.logger == nil {
		c.logger = logger
	}
	own := c.onPass
	c.onPass = func(res Result, err error) {
		if own != nil {
			own(res, err)
		}
		pass(idem.RelayPass{Delivered: res.Delivered, Retrying: res.Retrying, Parked: res.Parked, Superseded: res.Superseded}, err)
	}
	c.loop(ctx, r.s, r.d)
}

// outboxOf is the outbox store behind s, or an error naming the call and
// s's type.
func outboxOf(call string, s idem.Store) (idemstore.OutboxStore, error) {
	st, err := idemstore.Of(s)
	if err != nil {
		return nil, fmt.Errorf("idem: %s: %w", call, err)
	}
	ob, ok := st.(idemstore.OutboxStore)
	if !ok {
		return nil, storeof.Lacks(call, s, "idemstore.OutboxStore")
	}
	return ob, nil
}

// invalidOption is the error of an option given a value it cannot take:
// it matches ErrInvalidOption.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{idem.ErrInvalidOption}, args...)...)
}

// sleep waits d on c, or until ctx ends (its cause is returned then).
func sleep(ctx context.Context, c idem.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.After(d):
		return nil
	}
}
