package idemstore

import (
	"context"
	"time"
)

// ItemStore is a Store that also keeps the items of a period, for idem.Each:
// one business period, many items, each applied once. The ledgers implement
// it; a store of your own can prove itself with the conformance suite in
// package idemtest (Harness.Items).
//
// Items are recorded and claimed in chunks: AddItems records one chunk (the
// items it has not seen before, in order), and a chunk is claimed as a
// whole, under one lease and attempt, and worked in windows. A window's done
// marks are one write to the chunk's row (its settled position moves
// forward); only the items whose attempt did not end done (failed, unknown,
// parked) get a record of their own, and from then on they are claimed,
// retried and fenced one by one.
type ItemStore interface {
	Store

	// AddItems records items for key as one new chunk: the items not
	// recorded before, in the order given. Items already recorded are left
	// as they are, so generating the item set again adds nothing, in any
	// order. Once the set is sealed AddItems adds nothing.
	AddItems(ctx context.Context, key Key, items []string) error

	// SealItems records that key's item set is complete, so a restarted
	// Each need not generate it again.
	SealItems(ctx context.Context, key Key) error

	// CountItems counts key's items by status. Work a deferred call
	// handed back counts as pending, not running or failed: the unsettled
	// items of a running chunk with no item marked started past its
	// settled ones (its last step marked nothing started: Next 0), and an
	// item whose record is failed with Failures 0 (it never failed).
	CountItems(ctx context.Context, key Key) (ItemCounts, error)

	// ClaimItems takes runnable work of key for a new attempt, on the
	// store's clock req.Now, with a lease until req.Now+req.Lease, in one
	// transaction, durable if req.Durable. It takes a chunk if one is
	// runnable — a pending chunk, or a running one whose lease expired —
	// and returns its unsettled items in order, marking the first req.N of
	// them started; the items of an expired chunk that its last attempt had
	// marked started are in Doubt, and the chunk's failure count goes up by
	// one. Otherwise it takes up to req.N single items: failed items whose
	// NotBefore has passed, running items whose lease expired (Doubt, their
	// failure count up by one), and unknown items if req.TakeUnknown
	// (Doubt). Several claimers, in this process or on other hosts, never
	// get the same chunk or item at once. An empty batch means nothing is
	// runnable now. A chunk or item whose lease holds but whose owner's
	// process is gone ([HolderGone]) should count as expired, as for
	// [Store.Claim]; the ledgers check the running owners when nothing else
	// is runnable.
	ClaimItems(ctx context.Context, key Key, req ItemClaimRequest) (ItemBatch, error)

	// FinishItems records how item attempts ended, in one durable
	// transaction, even if ctx has ended (Each hands back the items it
	// did not start once its caller's context ends).
	//
	// For a chunk (step.Chunk != 0) ends are the chunk's items from
	// position step.From on, in order; fenced by the chunk's attempt: the
	// chunk's settled position moves to step.From+len(ends), its lease to
	// step.LeaseUntil, and its next step.Next items are marked started.
	// Ends that are not done become records of their own (single items).
	// If the chunk's attempt changed, or the chunk no longer runs, nothing
	// is written and every end is returned in lost.
	//
	// For single items (step.Chunk == 0) each end is fenced by its own
	// attempt: an item whose attempt changed (or that no longer runs) is
	// left as it is and returned in lost.
	FinishItems(ctx context.Context, key Key, step ItemStep, ends []ItemEnd) (lost []string, err error)
}

// ItemRecorder is an ItemStore that records a period's item set in bulk:
// idem.Each records the set with RecordItems instead of AddItems when the
// store has it, then seals it, and claims work only after that.
//
// RecordItems is AddItems of each of chunks in turn, without the check
// against the items recorded before: each chunk becomes a chunk of its
// items (a duplicate within it once, at its first place), unless the set
// is sealed or the same chunk was recorded before; an item that an earlier
// chunk holds is not removed from it yet. Such a chunk is neither claimed
// nor checked until SealItems, which removes from the unchecked chunks, in
// one pass over the set, every item that an earlier chunk (or an AddItems
// before) holds, and seals the set in the same transaction. Until then
// CountItems may count an item given in two chunks twice.
type ItemRecorder interface {
	ItemStore
	RecordItems(ctx context.Context, key Key, chunks [][]string) error
}

// ItemRecordTurns is an ItemRecorder on which one caller at a time records
// a period's item set: idem.Each takes the period's turn before it records
// the set, so that callers on other hosts wait for the set instead of
// recording the same items beside it, and record nothing once it is
// sealed.
//
// RecordTurn waits until no other caller holds key's turn, for at most
// wait, and takes it. A wait that ends first is no failure: the turn it
// returns is then not held, and records as RecordItems and SealItems do
// (the set recorded twice is recorded once). The store gives back the turn
// of a holder whose process or connection is gone, at once.
type ItemRecordTurns interface {
	ItemRecorder
	RecordTurn(ctx context.Context, key Key, wait time.Duration) (ItemTurn, error)
}

// ItemTurn is a turn to record a period's item set ([ItemRecordTurns]).
type ItemTurn interface {
	// Sealed reports whether the set was sealed when the turn was taken:
	// then there is nothing to record.
	Sealed() bool
	// RecordItems is the store's RecordItems, in the turn.
	RecordItems(ctx context.Context, chunks [][]string) error
	// Seal records last, as RecordItems does, then is the store's
	// SealItems, and ends the turn; a store may do both in one round
	// trip.
	Seal(ctx context.Context, last [][]string) error
	// Release ends the turn if Seal did not. What the turn recorded may be
	// kept or dropped: the set is not sealed, and the next caller records
	// it again. Call it once Seal has returned too: it then does nothing.
	Release()
}

// ItemTxStore is an ItemStore whose items' business writes can commit with
// their done marks: the transactional variant of Each (idem.EachTx).
type ItemTxStore[Tx any] interface {
	ItemStore

	// FinishItemsTx runs fn for each claim in ONE transaction, each item in
	// a savepoint: an item whose fn fails is rolled back alone and its end
	// (from failed) recorded; every other item's writes and its done mark
	// commit together, durably, with the failed items' ends, or (on any
	// other error) nothing does. step and fencing are as in FinishItems;
	// items whose attempt changed are skipped (fn does not run) and returned
	// in lost. It returns the ends it recorded, and calls [Checkpoint] with
	// [AfterFn] (and the period's key) before committing, if any fn ran.
	// [RunItemWindow] runs a window so over a store's transaction.
	FinishItemsTx(ctx context.Context, key Key, step ItemStep, claims []ItemClaim, fn func(tx Tx, c ItemClaim) error, failed func(c ItemClaim, err error) ItemEnd) (ends []ItemEnd, lost []string, err error)
}

// ItemClaimRequest asks ClaimItems for work.
type ItemClaimRequest struct {
	N           int // single items at most; a chunk's items marked started
	Owner       string
	Now         time.Time
	Lease       time.Duration
	Durable     bool
	TakeUnknown bool
}

// ItemBatch is the work ClaimItems took: a chunk's unsettled items, or
// single items.
type ItemBatch struct {
	Chunk   int64 // the chunk, numbered from 1; 0 when Items are single items
	Attempt int64 // the chunk's attempt, its fencing token
	Pos     int   // the chunk's settled position: Items[0]'s place in it
	Items   []ItemClaim
}

// ItemClaim is one item taken by ClaimItems.
type ItemClaim struct {
	Item     string
	Attempt  int64
	Failures int  // counts the abandoned attempts when Doubt
	Doubt    bool // an earlier attempt may have had its effect
}

// ItemStep moves claimed work forward (FinishItems, FinishItemsTx).
type ItemStep struct {
	Chunk      int64 // the batch's chunk; 0 for single items
	Attempt    int64 // the chunk's attempt
	From       int   // the position in the chunk of the first end
	Next       int   // how many items after the ends to mark started
	LeaseUntil time.Time
	Now        time.Time
}

// ItemEnd is how one item attempt ended.
type ItemEnd struct {
	Item      string
	Attempt   int64
	Status    Status // done, failed, unknown or parked
	Failures  int
	NotBefore time.Time
	Error     string
	Now       time.Time
}

// ItemCounts counts a period's items by status.
type ItemCounts struct {
	Sealed                                          bool // the item set is complete
	Pending, Running, Failed, Done, Unknown, Parked int64
	NextRetry                                       time.Time // earliest NotBefore of a failed item
	// Now is when the store counted, on the clock NextRetry is expressed
	// on, for a store whose clock is not the caller's (the Postgres
	// ledgers: this process's time.Now(), where the caller may run on
	// idem.WithClock's). Zero: NextRetry is on the caller's clock. A wait
	// for NextRetry lasts NextRetry - Now.
	Now time.Time
}

// Total is the number of items recorded.
func (c ItemCounts) Total() int64 {
	return c.Pending + c.Running + c.Failed + c.Done + c.Unknown + c.Parked
}
