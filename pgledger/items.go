package pgledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
)

var (
	_ idem.ItemStore           = (*Ledger)(nil)
	_ idem.ItemTxStore[pgx.Tx] = (*Ledger)(nil)
)

// The items of [idem.Each] live in the table items, one row per (job,
// period, item), and whether a period's item set is complete in itemsets.
// As for keys, leases and backoff deadlines are kept on the server's clock
// (clock_timestamp()); the Now fields the engine passes are ignored. Every
// commit is durable (synchronous_commit on, PostgreSQL's default), so a
// claim is durable whether or not the request asks for it.

// AddItems implements [idem.ItemStore]: one INSERT ... ON CONFLICT DO
// NOTHING of the whole batch (an unnest of an array), in one transaction.
func (l *Ledger) AddItems(ctx context.Context, key idem.Key, items []string) error {
	if len(items) == 0 {
		return nil
	}
	if _, err := l.pool.Exec(ctx, l.q.addItems, key.Job, key.Period, items); err != nil {
		return l.opErr("add items", key, err)
	}
	return nil
}

// SealItems implements [idem.ItemStore].
func (l *Ledger) SealItems(ctx context.Context, key idem.Key) error {
	if _, err := l.pool.Exec(ctx, l.q.sealItems, key.Job, key.Period); err != nil {
		return l.opErr("seal items", key, err)
	}
	return nil
}

// CountItems implements [idem.ItemStore], in one statement. NextRetry, the
// earliest backoff deadline of a failed item, is expressed on this process's
// clock: time.Now() plus what remains of the deadline on the server's clock
// (so a wait for it is right whatever the clocks' difference; a deadline
// already passed on the server's clock comes out in this process's past).
func (l *Ledger) CountItems(ctx context.Context, key idem.Key) (idem.ItemCounts, error) {
	var c idem.ItemCounts
	var next *time.Time
	var dbNow time.Time
	err := l.pool.QueryRow(ctx, l.q.countItems, key.Job, key.Period).Scan(&c.Sealed,
		&c.Pending, &c.Running, &c.Failed, &c.Done, &c.Unknown, &c.Parked, &next, &dbNow)
	if err != nil {
		return idem.ItemCounts{}, l.opErr("count items", key, err)
	}
	if next != nil {
		c.NextRetry = time.Now().Add(next.Sub(dbNow))
	}
	return c, nil
}

// ClaimItems implements [idem.ItemStore] with one statement, UPDATE ...
// WHERE ctid = ANY (ARRAY(SELECT ... FOR UPDATE SKIP LOCKED)) RETURNING:
// claimers on any number of hosts take disjoint items without waiting for
// each other (see claimItemsSQL for the plan). Runnable items are taken in
// this order: pending, failed whose backoff has passed, running whose lease
// expired (Doubt; the abandoned attempt counts as a failure and its last
// error says so), unknown if req.TakeUnknown (Doubt); within each, oldest
// change first (pending items in the order they were added). The lease runs
// until the server's time plus req.Lease (idem.DefaultLease if not
// positive); req.Now is ignored. The claims come back in item order.
func (l *Ledger) ClaimItems(ctx context.Context, key idem.Key, req idem.ItemClaimRequest) ([]idem.ItemClaim, error) {
	if req.N <= 0 {
		return nil, nil
	}
	lease := req.Lease
	if lease <= 0 {
		lease = idem.DefaultLease
	}
	rows, err := l.pool.Query(ctx, l.q.claimItems, key.Job, key.Period, req.Owner, micros(lease), int64(req.N), req.TakeUnknown)
	if err != nil {
		return nil, l.opErr("claim items", key, err)
	}
	claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idem.ItemClaim, error) {
		var c idem.ItemClaim
		err := row.Scan(&c.Item, &c.Attempt, &c.Failures, &c.Doubt)
		return c, err
	})
	if err != nil {
		return nil, l.opErr("claim items", key, err)
	}
	slices.SortFunc(claims, func(a, b idem.ItemClaim) int { return cmp.Compare(a.Item, b.Item) })
	return claims, nil
}

// batcher is what sends a batch of statements: the pool (the batch then
// runs in one implicit transaction) or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// execEach runs query once per item of a batch, in one round trip, and
// returns the items whose statement changed no row. args(i) are the
// arguments of item i's statement.
func execEach(ctx context.Context, q batcher, query string, items []string, args func(i int) []any) (unchanged []string, err error) {
	b := &pgx.Batch{}
	for i := range items {
		b.Queue(query, args(i)...)
	}
	br := q.SendBatch(ctx, b)
	for _, it := range items {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return nil, err
		}
		if tag.RowsAffected() == 0 {
			unchanged = append(unchanged, it)
		}
	}
	// Sent through the pool, the batch commits here.
	if err := br.Close(); err != nil {
		return nil, err
	}
	return unchanged, nil
}

// finishItems ends item attempts, each with a statement fenced by its
// attempt, and returns the items it did not end: their attempt changed, or
// they are no longer running.
func (l *Ledger) finishItems(ctx context.Context, q batcher, key idem.Key, ends []idem.ItemEnd) (lost []string, err error) {
	items := make([]string, len(ends))
	for i, e := range ends {
		switch e.Status {
		case idem.StatusDone, idem.StatusFailed, idem.StatusUnknown, idem.StatusParked:
		default:
			return nil, fmt.Errorf("cannot end item %q's attempt as %q", e.Item, e.Status)
		}
		items[i] = e.Item
	}
	return execEach(ctx, q, l.q.finishItem, items, func(i int) []any {
		e := ends[i]
		var backoff any // NULL: no deadline
		if !e.NotBefore.IsZero() {
			// The backoff is kept on the server's clock: NotBefore - Now
			// from the server's time.
			d := e.NotBefore.Sub(e.Now)
			if e.Now.IsZero() {
				d = time.Until(e.NotBefore)
			}
			backoff = micros(d)
		}
		return []any{key.Job, key.Period, e.Item, e.Attempt, string(e.Status), e.Failures, backoff, e.Error}
	})
}

// FinishItems implements [idem.ItemStore]: one UPDATE per item, fenced by
// its attempt, sent in one batch (one round trip), which PostgreSQL runs as
// one implicit transaction: all of them commit, durably, or none does. A backoff
// deadline is kept on the server's clock: end.NotBefore - end.Now from the
// server's time. The ends are recorded even if ctx is cancelled.
func (l *Ledger) FinishItems(ctx context.Context, key idem.Key, ends []idem.ItemEnd) ([]string, error) {
	if len(ends) == 0 {
		return nil, nil
	}
	ctx = context.WithoutCancel(ctx) // finished attempts must be recorded even if the caller gave up
	lost, err := l.finishItems(ctx, l.pool, key, ends)
	if err != nil {
		return nil, l.opErr("finish items", key, err)
	}
	return lost, nil
}

// FinishItemsTx implements [idem.ItemTxStore] with [pgx.Tx]: the batch runs
// in one transaction. It first fences every claim by its attempt (one
// statement per claim, in one round trip), which locks the rows of those
// that still hold their item until the transaction ends (the others are
// returned in lost and not run); then fn
// runs for each, in a savepoint of its own (an item whose fn fails is rolled
// back to it, alone, and returned in failed); the done marks of the others
// are written, and the transaction commits, durably. fn must use tx for its
// writes.
//
// An item's transaction holds its row lock while fn runs, so another host
// that finds the item's lease expired passes it over instead of taking it;
// keep a batch ([idem.WithBatch]) well within the lease all the same. Each
// item's savepoint is a subtransaction: a batch of more than 64 items that
// write is more than PostgreSQL caches per transaction, which other
// sessions' snapshots pay for while it runs; the default batch of 100 is
// fine for most databases, lower it on a very busy one.
func (l *Ledger) FinishItemsTx(ctx context.Context, key idem.Key, claims []idem.ItemClaim, now time.Time, fn func(tx pgx.Tx, c idem.ItemClaim) error) (map[string]error, []string, error) {
	failed := map[string]error{}
	if len(claims) == 0 {
		return failed, nil, nil
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, nil, l.opErr("run items", key, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	items := make([]string, len(claims))
	for i, c := range claims {
		items[i] = c.Item
	}
	lost, err := execEach(ctx, tx, l.q.fenceItem, items, func(i int) []any {
		return []any{key.Job, key.Period, claims[i].Item, claims[i].Attempt}
	})
	if err != nil {
		return nil, nil, l.opErr("run items: fence", key, err)
	}
	isLost := make(map[string]bool, len(lost))
	for _, it := range lost {
		isLost[it] = true
	}
	var done []idem.ItemEnd
	savepoint := `SAVEPOINT idem_item`
	for _, c := range claims {
		if isLost[c.Item] {
			continue
		}
		if _, err := tx.Exec(ctx, savepoint); err != nil {
			return nil, nil, l.opErr("run items: savepoint", key, err)
		}
		// The next item's savepoint replaces this one (one round trip).
		savepoint = `RELEASE SAVEPOINT idem_item; SAVEPOINT idem_item`
		if ferr := fn(tx, c); ferr != nil {
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT idem_item`); err != nil {
				return nil, nil, l.opErr("run items: roll back item "+c.Item, key, errors.Join(err, ferr))
			}
			failed[c.Item] = ferr
			continue
		}
		done = append(done, idem.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: idem.StatusDone})
	}
	if len(done) > 0 {
		if notDone, err := l.finishItems(ctx, tx, key, done); err != nil {
			return nil, nil, l.opErr("run items: done marks", key, err)
		} else if len(notDone) > 0 { // cannot happen while the row locks are held
			return nil, nil, l.opErr("run items: done marks", key, fmt.Errorf("%d items changed under their row locks (first %q)", len(notDone), notDone[0]))
		}
	}
	if err := idem.Checkpoint(ctx, idem.AfterFn, key); err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, l.opErr("run items: commit", key, err)
	}
	return failed, lost, nil
}
