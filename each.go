package idem

// Fan-out: Each applies a function once to each item of one business
// period, the way Run does the period itself ("grant 10 points to every
// eligible account for 2026-10-27"); EachTx with the store's transaction.
// The engine is items.go.

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/runctx"
	"github.com/idemgo/idem/internal/storeof"
)

// DefaultWorkers is how many items Each works on at once unless told
// otherwise: small, so it does not exhaust the database's connections.
const DefaultWorkers = 4

// Progress is the progress of a period's items ([OnProgress]).
type Progress struct {
	Key   Key
	Done  int64 // done or parked
	Total int64 // recorded so far
}

// EachResult reports an Each call: the period's items by status when it
// returned. An error comes with the outcome of a failure (Failed where
// nothing more precise applies). A period found done is AlreadyDone with
// no error even if its items could not be counted: Counts is then empty.
type EachResult struct {
	Key     Key
	Outcome Outcome // Ran when the period was completed now, AlreadyDone, or the failure
	Counts  ItemCounts
	Parked  []string // items parked by this call (at most 100 listed)
}

// Items adapts a sequence of item ids that cannot fail to the form Each
// takes.
func Items(seq iter.Seq[string]) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for it := range seq {
			if !yield(it, nil) {
				return
			}
		}
	}
}

// Each applies fn once to each item of one business period, the way Run
// does the period itself: "grant 10 points to every eligible account for
// 2026-10-27". Several processes or hosts may run Each for the same key at
// once; they share its items. The store keeps the period's item set: behind
// s there must be an [idemstore.ItemStore] (Ledger and the Postgres
// ledgers have one); another store is the call's error, naming it.
//
// items is a stream of stable item ids (account ids), generated again on
// every call until the item set is recorded completely, and never held in
// memory at once: every 500 ids are inserted into the period's item set
// (INSERT ... ON CONFLICT DO NOTHING), and the ones that were new form one
// chunk (a period too small to give each worker 500 is cut into a chunk
// per worker). Generating the set again, in any order, adds only ids not seen
// before. Where the store gives turns to record a set
// ([idemstore.ItemRecordTurns]: the Postgres and MySQL ledgers), one call at a time
// generates and records it: the calls of other processes and hosts wait for
// its turn (for a lease at most, then they record too), and a call that
// finds the set sealed once it has the turn generates nothing. A recorder
// that dies hands its turn on at once. Each item id must be valid as a Key
// part (non-empty, at most 200 bytes, valid UTF-8, no control characters).
//
// A worker claims a whole chunk, under one lease, and applies its items in
// order, in windows ([WithBatch]): a window's done marks are one write,
// which also renews the lease and marks the next window started. Up to
// [WithWorkers] workers run at once, each on its own chunk; once no chunk
// is left they take the items that failed, one by one. The mode is chosen
// as for Run:
//
//	AtLeastOnce   a dead worker's started items run again
//	AtMostOnce    a dead worker's started items are unknown (window 1: one item at most)
//	TwoPhase(has) a dead worker's started items are checked with has (InfoFrom(ctx).Item names it)
//
// and [EachTx] for the transactional variant. Failures back off per item
// (attempts, next-allowed time and last error are kept per item); after the
// Backoff's last attempt, or on a Permanent error, the item is parked and
// reported. fn gets the item id, and its context carries [Info] with the
// item and a request id of its own, [Key.ItemRequestID] (not the id of any
// period).
//
// Each returns when every item is done or parked: then it marks the period
// itself done (Outcome Ran). Where the store can mark a key that has no
// record done in one write ([idemstore.FreshMarker]: the Postgres ledgers),
// the mark is that write, and the holders that settle the last items
// together find the period done rather than wait for one another's mark.
// The mark has no effect of its own, so it is written as AtLeastOnce would
// write it whatever the items' mode: a call that dies before writing it
// leaves nothing unknown and parks nothing, and the items' TwoPhase check
// is never asked about the period; the next call writes it.
// A later Each of a done period returns at once (AlreadyDone). Items that are unknown keep the period open: Each returns
// an error matching ErrUnknownOutcome. While other holders work items, or
// items back off, Each waits for them, until ctx ends: it looks at the
// items again after 1 ms, then after twice as long each time, up to 200 ms
// (a backoff, until its deadline).
//
// Overload: [WithRate] and [WithPause] pace the items; guards
// ([WithGuard]: memory, free disk, a function of yours) are asked before
// each claim and before each window is marked started, and a [Breaker]
// ([WithBreaker]) counts fn's failures. A guard that refuses, or a breaker
// that opens, DEFERS the call: the workers claim nothing more, the windows
// already marked started run (a guard) or are handed back unrun (a
// breaker: each of their items ends failed with its failure count
// unchanged, due at once), the chunks' leases end at once (CountItems counts
// what was handed back as pending, not running or failed), and Each returns
// an error matching [ErrDeferred] (Outcome Deferred, the reason in
// *[Deferral]) without waiting for anything. Items not started stay
// unclaimed: no attempt, failure or park is counted for them, and the next
// call goes on with them. It does NOT promise that no item starts after
// the guard's measure crossed its limit (a window runs between two
// checks), nor that no failure is recorded once a downstream is down (up
// to the breaker's threshold, plus one per worker in flight); and a chunk
// handed back counts, in the store, one abandoned attempt, which only
// items a later crash leaves in doubt would carry.
//
// When ctx ends (a SIGTERM's signal.NotifyContext, say), or a worker's
// store call fails, the call ends: no item starts after it. The items
// running finish as fn makes them (a worker's error does not cancel the
// others' contexts, nor a store call on its way), and the items claimed
// and not started are handed back as a breaker's are; Each returns ctx's
// error, or the worker's, with Outcome Failed. It does NOT make an item
// that fn gave up on mid-effect (ctx ended inside fn) any less doubtful:
// in AtMostOnce fn should return [NothingHappened] when it knows its
// effect did not start. A store call abandoned to ctx (a claim sent just
// as ctx ended, whose reply the driver does not wait for) may still be
// applied by the server: its items wait for its lease, as a dead
// process's do.
//
// An observer ([OnResult]) gets one [Result] per call, whatever it
// returns, with the period's item counts in Result.Items.
func Each(ctx context.Context, s Store, key Key, items iter.Seq2[string, error], fn func(ctx context.Context, item string) error, opts ...Option) (EachResult, error) {
	if fn == nil {
		panic("idem: Each with a nil fn")
	}
	return eachCall(ctx, s, nil, key, items, fn, opts, nil)
}

// EachTx is [Each] for a store whose transactions are of type Tx (an
// [idemstore.ItemTxStore] behind s): fn gets the store's
// transaction, and each item's business writes commit together with its done
// mark, or not at all; a batch of items shares one transaction (one commit),
// each item in a savepoint. For writes in that database every item takes effect
// exactly once. It takes no mode option, and ignores a store's default mode
// for its items: a failed or killed item left nothing behind and is simply
// run again.
func EachTx[Tx any](ctx context.Context, s TxStore[Tx], key Key, items iter.Seq2[string, error], fn func(ctx context.Context, tx Tx, item string) error, opts ...Option) (EachResult, error) {
	if fn == nil {
		panic("idem: EachTx with a nil fn")
	}
	its, storeErr := storeAs[idemstore.ItemTxStore[Tx]]("EachTx", s)
	// A window of items runs in one transaction of the store; item runs
	// each item's call of fn (with its Info in ctx), in a savepoint, with
	// the item's outbox.
	tx := func(clock Clock) txItems {
		return func(ctx context.Context, step idemstore.ItemStep, claims []idemstore.ItemClaim, item itemFunc,
			failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
			return its.FinishItemsTx(ctx, key, step, claims, func(tx Tx, c idemstore.ItemClaim) error {
				return item(ctx, c, func(ctx context.Context) error {
					w := &runctx.Outbox{Tx: tx, Store: its, Key: key, Item: c.Item, Now: clock.Now}
					return fn(runctx.WithOutbox(ctx, w), tx, c.Item)
				})
			}, failed)
		}
	}
	return eachCall(ctx, s, storeErr, key, items, nil, opts, tx)
}

// eachCall is Each (fn) or EachTx (tx, which builds from the call's clock
// the function that runs a window of items in the store's transaction).
// The store behind s must be an idemstore.ItemStore; storeErr, when not
// nil, is what the caller found wrong with it (EachTx's: not an
// ItemTxStore of its type): both are the call's error, reported as an
// invalid option's is.
func eachCall(ctx context.Context, s Store, storeErr error, key Key, items iter.Seq2[string, error], fn func(context.Context, string) error,
	opts []Option, tx func(clock Clock) txItems) (EachResult, error) {
	call := callEach
	if tx != nil {
		call = callEachTx
	}
	st, err := idemstore.Of(s)
	cfg := configureEach(ctx, st, call, opts)
	is, ok := st.(idemstore.ItemStore)
	switch {
	case storeErr != nil:
		cfg.err = storeErr
	case err != nil:
		cfg.err = fmt.Errorf("idem: %s: %w", call.name, err)
	case !ok:
		cfg.err = storeof.Lacks(call.name, s, "idemstore.ItemStore")
	}
	var t txItems
	if tx != nil {
		t = tx(cfg.clock)
	}
	res, err := each(ctx, is, key, items, cfg, fn, t)
	return EachResult{Key: key, Outcome: res.Outcome, Counts: res.Counts, Parked: res.Parked}, err
}

// WithWorkers sets how many items Each works on at once (default
// [DefaultWorkers]). An n below 1 is an error matching [ErrInvalidOption].
func WithWorkers(n int) Option {
	return newOption("WithWorkers", classFanOut, func(c *config) error {
		if n < 1 {
			return invalidOption("WithWorkers(%d): at least one worker is needed", n)
		}
		c.each.workers = n
		return nil
	})
}

// WithBatch sets the window of Each: how many items a worker applies
// between two commits of their done marks (default 100; 1 in AtMostOnce).
// A window also ends once a third of the lease has passed, so that its done
// marks renew the lease of a chunk of slow items in time.
// Before a window runs, its items are marked started, in the commit that
// ends the window before it: after a crash those items, and no others, are
// in doubt — run again (AtLeastOnce), unknown (AtMostOnce) or checked
// (TwoPhase). Larger windows mean fewer commits and more doubt. An n below
// 1 is an error matching [ErrInvalidOption].
func WithBatch(n int) Option {
	return newOption("WithBatch", classFanOut, func(c *config) error {
		if n < 1 {
			return invalidOption("WithBatch(%d): a window holds at least one item", n)
		}
		c.each.batch = n
		return nil
	})
}

// OnProgress calls f after every committed batch with the period's
// progress, enough to drive a progress bar or a log line every N items. f is
// called from Each's workers, one call at a time. A nil f is an error
// matching [ErrInvalidOption].
func OnProgress(f func(Progress)) Option {
	return newOption("OnProgress", classFanOut, func(c *config) error {
		if f == nil {
			return invalidOption("OnProgress(nil): no function to call")
		}
		c.each.progress = func(key Key, done, total int64) { f(Progress{Key: key, Done: done, Total: total}) }
		return nil
	})
}

// WithRate paces Each's items: fn starts for at most perSecond items a
// second, after a first burst of up to burst items (golang.org/x/time/rate,
// on the call's clock). The limit is the call's, shared by its workers; two
// calls (two hosts) each have their own. With EachTx a window of items is
// one transaction, which waits for its items' tokens before it begins, so a
// window holds at most burst items there. A perSecond not above 0, a burst
// below 1, or (at the call) a pace slower than one item per third of the
// lease is an error matching [ErrInvalidOption].
func WithRate(perSecond float64, burst int) Option {
	return newOption("WithRate", classFanOut, func(c *config) error {
		if !(perSecond > 0) || burst < 1 {
			return invalidOption("WithRate(%v, %d): the rate must be above 0 and the burst at least 1", perSecond, burst)
		}
		c.each.rate, c.each.burst = perSecond, burst
		return nil
	})
}

// WithPause makes each of Each's workers pause for d after each window it
// commits (seed: "a pause of 0.5-1 s between batches, so the database can
// breathe"). With several workers, their windows still overlap: the pause
// spaces each worker's own. A negative d, or (at the call) a d not below a
// third of the lease, which the pause would let run out, is an error
// matching [ErrInvalidOption].
func WithPause(d time.Duration) Option {
	return newOption("WithPause", classFanOut, func(c *config) error {
		if d < 0 {
			return invalidOption("WithPause(%v): the pause must not be negative", d)
		}
		c.each.pause = d
		return nil
	})
}

// WithBreaker makes Each and EachTx stop feeding a failing downstream: b
// counts fn's failures and, once open, defers the call ([Breaker]). Pass
// the same b to every call of the job. A nil b, or one [NewBreaker] made of
// bad values, is an error matching [ErrInvalidOption].
func WithBreaker(b *Breaker) Option {
	return newOption("WithBreaker", classFanOut, func(c *config) error {
		if b == nil {
			return invalidOption("WithBreaker(nil): no breaker")
		}
		if err := b.b.Validate(); err != nil {
			return invalidOption("WithBreaker: %s", err)
		}
		c.each.breaker = &itemBreaker{b.b}
		return nil
	})
}
