// Package fanout applies a function once to each item of one business
// period, the way idem.Run does the period itself ("grant 10 points to
// every eligible account for 2026-10-27"): Each and EachTx, shared by the
// processes and hosts that run them at once, with per-item backoff, the
// run modes of idem, pacing, guards and a breaker.
package fanout

import (
	"context"
	"iter"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/guard"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/breaker"
	"github.com/idemgo/idem/internal/core"
	"github.com/idemgo/idem/internal/hook"
	"github.com/idemgo/idem/internal/runctx"
)

// DefaultWorkers is how many items Each works on at once unless told
// otherwise: small, so it does not exhaust the database's connections.
const DefaultWorkers = 4

// Progress is the progress of a period's items ([OnProgress]).
type Progress struct {
	Key   idem.Key
	Done  int64 // done or parked
	Total int64 // recorded so far
}

// Result reports an Each call: the period's items by status when it
// returned. An error comes with the outcome of a failure (Failed where
// nothing more precise applies). A period found done is AlreadyDone with
// no error even if its items could not be counted: Counts is then empty.
type Result struct {
	Key     idem.Key
	Outcome idem.Outcome // Ran when the period was completed now, AlreadyDone, or the failure
	Counts  idem.ItemCounts
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
// s there must be an [idemstore.ItemStore] (idem.Ledger and the Postgres
// ledgers have one); another store is the call's error, naming it.
//
// items is a stream of stable item ids (account ids), generated again on
// every call until the item set is recorded completely, and never held in
// memory at once: every 500 ids are inserted into the period's item set
// (INSERT ... ON CONFLICT DO NOTHING), and the ones that were new form one
// chunk (a period too small to give each worker 500 is cut into a chunk
// per worker). Generating the set again, in any order, adds only ids not seen
// before. Where the store gives turns to record a set
// ([idemstore.ItemRecordTurns]: the Postgres ledgers), one call at a time
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
// reported. fn gets the item id, and its context carries [idem.Info] with the
// item and a request id of its own, [idem.Key.ItemRequestID] (not the id of any
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
// ([idem.WithGuard]: memory, free disk, a function of yours) are asked before
// each claim and before each window is marked started, and a [guard.Breaker]
// ([WithBreaker]) counts fn's failures. A guard that refuses, or a breaker
// that opens, DEFERS the call: the workers claim nothing more, the windows
// already marked started run (a guard) or are handed back unrun (a
// breaker: each of their items ends failed with its failure count
// unchanged, due at once), the chunks' leases end at once (CountItems counts
// what was handed back as pending, not running or failed), and Each returns
// an error matching [idem.ErrDeferred] (Outcome Deferred, the reason in
// *[idem.Deferral]) without waiting for anything. Items not started stay
// unclaimed: no attempt, failure or park is counted for them, and the next
// call goes on with them. It does NOT promise that no item starts after
// the guard's measure crossed its limit (a window runs between two
// checks), nor that no failure is recorded once a downstream is down (up
// to the breaker's threshold, plus one per worker in flight); and a chunk
// handed back counts, in the store, one abandoned attempt, which only
// items a later crash leaves in doubt would carry.
//
// An observer ([idem.OnResult]) gets one [idem.Result] per call, whatever it
// returns, with the period's item counts in Result.Items.
func Each(ctx context.Context, s idem.Store, key idem.Key, items iter.Seq2[string, error], fn func(ctx context.Context, item string) error, opts ...idem.Option) (Result, error) {
	if fn == nil {
		panic("fanout: Each with a nil fn")
	}
	o, counts, parked, err := core.R.Each(ctx, s, nil, key, items, fn, opts, nil)
	return Result{Key: key, Outcome: o, Counts: counts, Parked: parked}, err
}

// EachTx is [Each] for a store whose transactions are of type Tx (an
// [idemstore.ItemTxStore] behind s): fn gets the store's
// transaction, and each item's business writes commit together with its done
// mark, or not at all; a batch of items shares one transaction (one commit),
// each item in a savepoint. For writes in that database every item takes effect
// exactly once. It takes no mode option, and ignores a store's default mode
// for its items: a failed or killed item left nothing behind and is simply
// run again.
func EachTx[Tx any](ctx context.Context, s idem.TxStore[Tx], key idem.Key, items iter.Seq2[string, error], fn func(ctx context.Context, tx Tx, item string) error, opts ...idem.Option) (Result, error) {
	if fn == nil {
		panic("fanout: EachTx with a nil fn")
	}
	its, storeErr := core.StoreAs[idemstore.ItemTxStore[Tx]]("fanout.EachTx", s)
	// A window of items runs in one transaction of the store; item runs
	// each item's call of fn (with its Info in ctx), in a savepoint, with
	// the item's outbox.
	tx := func(clock idem.Clock) any {
		return func(ctx context.Context, step idemstore.ItemStep, claims []idemstore.ItemClaim,
			item func(context.Context, idemstore.ItemClaim, func(context.Context) error) error,
			failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
			return its.FinishItemsTx(ctx, key, step, claims, func(tx Tx, c idemstore.ItemClaim) error {
				return item(ctx, c, func(ctx context.Context) error {
					w := &runctx.Outbox{Tx: tx, Store: its, Key: key, Item: c.Item, Now: clock.Now}
					return fn(runctx.WithOutbox(ctx, w), tx, c.Item)
				})
			}, failed)
		}
	}
	o, counts, parked, err := core.R.Each(ctx, s, storeErr, key, items, nil, opts, tx)
	return Result{Key: key, Outcome: o, Counts: counts, Parked: parked}, err
}

// WithWorkers sets how many items Each works on at once (default
// [DefaultWorkers]). An n below 1 is an error matching [idem.ErrInvalidOption].
func WithWorkers(n int) idem.Option { return core.R.Workers(n) }

// WithBatch sets the window of Each: how many items a worker applies
// between two commits of their done marks (default 100; 1 in AtMostOnce).
// A window also ends once a third of the lease has passed, so that its done
// marks renew the lease of a chunk of slow items in time.
// Before a window runs, its items are marked started, in the commit that
// ends the window before it: after a crash those items, and no others, are
// in doubt — run again (AtLeastOnce), unknown (AtMostOnce) or checked
// (TwoPhase). Larger windows mean fewer commits and more doubt. An n below
// 1 is an error matching [idem.ErrInvalidOption].
func WithBatch(n int) idem.Option { return core.R.Batch(n) }

// OnProgress calls f after every committed batch with the period's
// progress, enough to drive a progress bar or a log line every N items. f is
// called from Each's workers, one call at a time. A nil f is an error
// matching [idem.ErrInvalidOption].
func OnProgress(f func(Progress)) idem.Option {
	if f == nil {
		return core.R.Progress(nil)
	}
	return core.R.Progress(func(key idem.Key, done, total int64) { f(Progress{Key: key, Done: done, Total: total}) })
}

// WithRate paces Each's items: fn starts for at most perSecond items a
// second, after a first burst of up to burst items (golang.org/x/time/rate,
// on the call's clock). The limit is the call's, shared by its workers; two
// calls (two hosts) each have their own. With EachTx a window of items is
// one transaction, which waits for its items' tokens before it begins, so a
// window holds at most burst items there. A perSecond not above 0, a burst
// below 1, or (at the call) a pace slower than one item per third of the
// lease is an error matching [idem.ErrInvalidOption].
func WithRate(perSecond float64, burst int) idem.Option { return core.R.Rate(perSecond, burst) }

// WithPause makes each of Each's workers pause for d after each window it
// commits (seed: "a pause of 0.5-1 s between batches, so the database can
// breathe"). With several workers, their windows still overlap: the pause
// spaces each worker's own. A negative d, or (at the call) a d not below a
// third of the lease, which the pause would let run out, is an error
// matching [idem.ErrInvalidOption].
func WithPause(d time.Duration) idem.Option { return core.R.Pause(d) }

// WithBreaker makes Each and EachTx stop feeding a failing downstream: b
// counts fn's failures and, once open, defers the call ([guard.Breaker]). Pass
// the same b to every call of the job. A nil b, or one guard.NewBreaker made of
// bad values, is an error matching [idem.ErrInvalidOption].
func WithBreaker(b *guard.Breaker) idem.Option { return core.R.Breaker(breakerOf(b)) }

// breakerOf is package guard's: a Breaker's state machine.
var breakerOf = hook.BreakerOf.(func(*guard.Breaker) *breaker.Breaker)
