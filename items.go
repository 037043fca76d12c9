package idem

import (
	"context"
	"time"
)

// ItemStore is a Store that also keeps one record per item of a period, for
// [Each]: one business period, many items, each applied once. The ledgers
// implement it.
type ItemStore interface {
	Store

	// AddItems records items for key. Items already recorded are left as
	// they are, so generating the item set again adds nothing.
	AddItems(ctx context.Context, key Key, items []string) error

	// SealItems records that key's item set is complete, so a restarted
	// Each need not generate it again.
	SealItems(ctx context.Context, key Key) error

	// CountItems counts key's items by status.
	CountItems(ctx context.Context, key Key) (ItemCounts, error)

	// ClaimItems takes up to req.N runnable items of key for a new attempt
	// each (attempt+1, a lease until req.Now+req.Lease on the store's
	// clock), in one transaction, durable if req.Durable: pending items,
	// failed items whose NotBefore has passed, running items whose lease
	// expired (Doubt), and unknown items if req.TakeUnknown (Doubt). An
	// abandoned item's failure count goes up by one. Several claimers, in
	// this process or on other hosts, never get the same item at once.
	ClaimItems(ctx context.Context, key Key, req ItemClaimRequest) ([]ItemClaim, error)

	// FinishItems records how item attempts ended, in one durable
	// transaction, each fenced by its attempt: an item whose attempt
	// changed (or that is no longer running) is left as it is and returned
	// in lost.
	FinishItems(ctx context.Context, key Key, ends []ItemEnd) (lost []string, err error)
}

// ItemTxStore is an ItemStore whose items' business writes can commit with
// their done marks: the transactional variant of Each ([EachTx]).
type ItemTxStore[Tx any] interface {
	ItemStore

	// FinishItemsTx runs fn for each claim in ONE transaction, each item in
	// a savepoint: an item whose fn fails is rolled back alone and returned
	// in failed; every other item's writes and its done mark commit together,
	// durably, or (on any other error) nothing does. Items whose attempt
	// changed are skipped and returned in lost. It calls [Checkpoint] with
	// [AfterFn] (and the period's key) before committing.
	FinishItemsTx(ctx context.Context, key Key, claims []ItemClaim, now time.Time, fn func(tx Tx, c ItemClaim) error) (failed map[string]error, lost []string, err error)
}

// ItemClaimRequest asks ClaimItems for a batch.
type ItemClaimRequest struct {
	N           int
	Owner       string
	Now         time.Time
	Lease       time.Duration
	Durable     bool
	TakeUnknown bool
}

// ItemClaim is one item taken by ClaimItems.
type ItemClaim struct {
	Item     string
	Attempt  int64
	Failures int  // counts the abandoned attempt when Doubt
	Doubt    bool // an earlier attempt may have had its effect
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
}

// Total is the number of items recorded.
func (c ItemCounts) Total() int64 {
	return c.Pending + c.Running + c.Failed + c.Done + c.Unknown + c.Parked
}

// open is the number of items that are not settled and can still be worked
// (unknown items are settled only by a check or a person).
func (c ItemCounts) open() int64 { return c.Pending + c.Running + c.Failed }
