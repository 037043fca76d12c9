package idemstore

import (
	"context"
	"errors"
	"fmt"
)

// CheckEnds refuses ends of which one has a status that does not end an
// item's attempt: an item ends done, failed, unknown or parked.
func CheckEnds(ends []ItemEnd) error {
	for _, e := range ends {
		switch e.Status {
		case StatusDone, StatusFailed, StatusUnknown, StatusParked:
		default:
			return fmt.Errorf("cannot end item %q's attempt as %q", e.Item, e.Status)
		}
	}
	return nil
}

// EndItems returns the items of ends, in order: what FinishItems returns in
// lost when a chunk's attempt no longer holds it.
func EndItems(ends []ItemEnd) []string {
	items := make([]string, len(ends))
	for i, e := range ends {
		items[i] = e.Item
	}
	return items
}

// ItemWindow is what [RunItemWindow] needs of a store's transaction to run
// one window of [ItemTxStore.FinishItemsTx]: the transaction that fn gets,
// a savepoint per item, and the window's fence and done marks, written as
// the store writes them. The store begins the transaction before
// RunItemWindow and commits it, durably, after it returns with no error;
// on an error it rolls the transaction back.
type ItemWindow[Tx any] interface {
	// Tx is the transaction handed to fn.
	Tx() Tx

	// Fence checks, before any fn runs, that the window's claims are
	// still held, and keeps them held until the transaction ends (a row
	// lock, or the database's write lock). It returns the items whose
	// attempt no longer holds them: for a chunk (step.Chunk != 0), every
	// claim's or none (a store may move the chunk forward here, since the
	// transaction commits it with the ends or not at all); for single
	// items, those whose own attempt changed or that no longer run.
	Fence(ctx context.Context, key Key, step ItemStep, claims []ItemClaim) (lost []string, err error)

	// Savepoint starts a savepoint for the next item's writes. The
	// previous item's savepoint is no longer needed: a store may release it
	// here.
	Savepoint(ctx context.Context) error

	// RollbackTo undoes the writes made since the last Savepoint, and only
	// those; the transaction goes on.
	RollbackTo(ctx context.Context) error

	// Record writes how the items that ran ended, as FinishItems does (a
	// chunk's settled position moves past them and its lease to
	// step.LeaseUntil; the ends that are not done get records of their
	// own), under the fence. An attempt found not to hold its work here is
	// an error: the fence keeps it held.
	Record(ctx context.Context, key Key, step ItemStep, ends []ItemEnd) error
}

// RunItemWindow runs one window of [ItemTxStore.FinishItemsTx] in a
// store's transaction w: the fence first, then fn for each claim still
// held, each in a savepoint of its own (an item whose fn fails is rolled
// back to it, alone, and its end taken from failed; every other item ends
// done at step.Now), then the ends, written with [ItemWindow.Record], and
// [Checkpoint] at [AfterFn] before the store commits. It returns the ends
// and the items the fence found lost (fn did not run for them). When no fn
// ran (every claim lost), it writes nothing more and reaches no
// checkpoint. fn must use the transaction for its writes.
func RunItemWindow[Tx any](ctx context.Context, w ItemWindow[Tx], key Key, step ItemStep, claims []ItemClaim,
	fn func(tx Tx, c ItemClaim) error, failed func(c ItemClaim, err error) ItemEnd) (ends []ItemEnd, lost []string, err error) {
	lost, err = w.Fence(ctx, key, step, claims)
	if err != nil {
		return nil, nil, fmt.Errorf("fence: %w", err)
	}
	gone := make(map[string]bool, len(lost))
	for _, it := range lost {
		gone[it] = true
	}
	ends = make([]ItemEnd, 0, len(claims))
	for _, c := range claims {
		if gone[c.Item] {
			continue
		}
		if err := w.Savepoint(ctx); err != nil {
			return nil, nil, fmt.Errorf("savepoint for item %q: %w", c.Item, err)
		}
		end := ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusDone, Now: step.Now}
		if ferr := fn(w.Tx(), c); ferr != nil {
			if err := w.RollbackTo(ctx); err != nil {
				return nil, nil, fmt.Errorf("roll back item %q: %w", c.Item, errors.Join(err, ferr))
			}
			end = failed(c, ferr)
		}
		ends = append(ends, end)
	}
	if len(ends) == 0 {
		return nil, lost, nil
	}
	if err := CheckEnds(ends); err != nil {
		return nil, nil, err
	}
	if err := w.Record(ctx, key, step, ends); err != nil {
		return nil, nil, fmt.Errorf("done marks: %w", err)
	}
	if err := Checkpoint(ctx, AfterFn, key); err != nil {
		return nil, nil, err
	}
	return ends, lost, nil
}
