package idem

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

var (
	_ ItemStore            = (*Ledger)(nil)
	_ ItemTxStore[*sql.Tx] = (*Ledger)(nil)
)

// AddItems implements [ItemStore] with multi-row INSERT ... ON CONFLICT DO
// NOTHING, in one transaction.
func (l *Ledger) AddItems(ctx context.Context, key Key, items []string) error {
	if len(items) == 0 {
		return nil
	}
	err := l.withTx(ctx, false, func(tx *wtx) error {
		const chunk = 500
		for len(items) > 0 {
			n := min(chunk, len(items))
			var q strings.Builder
			q.WriteString(`INSERT INTO idem_items(job, period, item) VALUES `)
			args := make([]any, 0, 3*n)
			for i, it := range items[:n] {
				if i > 0 {
					q.WriteByte(',')
				}
				q.WriteString("(?,?,?)")
				args = append(args, key.Job, key.Period, it)
			}
			q.WriteString(` ON CONFLICT DO NOTHING`)
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				return err
			}
			items = items[n:]
		}
		return nil
	})
	if err != nil {
		return l.opErr("add items", key, err)
	}
	return nil
}

// SealItems implements [ItemStore].
func (l *Ledger) SealItems(ctx context.Context, key Key) error {
	err := l.withTx(ctx, true, func(tx *wtx) error {
		_, err := tx.exec(`INSERT INTO idem_itemsets(job, period, sealed) VALUES(?, ?, 1)
			ON CONFLICT(job, period) DO UPDATE SET sealed = 1`, key.Job, key.Period)
		return err
	})
	if err != nil {
		return l.opErr("seal items", key, err)
	}
	return nil
}

// CountItems implements [ItemStore].
func (l *Ledger) CountItems(ctx context.Context, key Key) (ItemCounts, error) {
	var c ItemCounts
	err := busyRetry(ctx, func() error {
		c = ItemCounts{}
		var sealed int
		err := l.queryRow(ctx, `SELECT sealed FROM idem_itemsets WHERE job=? AND period=?`, key.Job, key.Period).Scan(&sealed)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		c.Sealed = sealed == 1
		rows, err := l.db.QueryContext(ctx, `SELECT status, count(*), min(not_before) FROM idem_items
			WHERE job=? AND period=? GROUP BY status`, key.Job, key.Period)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var status string
			var n, nb int64
			if err := rows.Scan(&status, &n, &nb); err != nil {
				return err
			}
			switch Status(status) {
			case "pending":
				c.Pending = n
			case StatusRunning:
				c.Running = n
			case StatusFailed:
				c.Failed, c.NextRetry = n, fromMicros(nb)
			case StatusDone:
				c.Done = n
			case StatusUnknown:
				c.Unknown = n
			case StatusParked:
				c.Parked = n
			}
		}
		return rows.Err()
	})
	if err != nil {
		return ItemCounts{}, l.opErr("count items", key, err)
	}
	return c, nil
}

// ClaimItems implements [ItemStore]: one UPDATE ... RETURNING over a
// LIMITed selection of runnable items, under SQLite's write lock.
func (l *Ledger) ClaimItems(ctx context.Context, key Key, req ItemClaimRequest) ([]ItemClaim, error) {
	var claims []ItemClaim
	err := l.withTx(ctx, req.Durable, func(tx *wtx) error {
		claims = claims[:0]
		now, until := micros(req.Now), micros(req.Now.Add(req.Lease))
		st, err := tx.stmt(`UPDATE idem_items SET
				doubt = (status IN ('running', 'unknown')),
				failures = failures + (status = 'running'),
				last_error = CASE WHEN status = 'running'
					THEN 'attempt ' || attempt || ' by ' || owner || ' abandoned: lease expired without a done mark'
					ELSE last_error END,
				status = 'running', attempt = attempt + 1, owner = ?, lease_until = ?, updated = ?
			WHERE job = ? AND period = ? AND item IN (
				-- One index range (job, period, status) per branch: an OR
				-- over statuses would scan every item of the period.
				SELECT item FROM idem_items WHERE job = ? AND period = ? AND status = 'pending'
				UNION ALL
				SELECT item FROM idem_items WHERE job = ? AND period = ? AND status = 'failed' AND not_before <= ?
				UNION ALL
				SELECT item FROM idem_items WHERE job = ? AND period = ? AND status = 'running' AND lease_until <= ?
				UNION ALL
				SELECT item FROM idem_items WHERE ? AND job = ? AND period = ? AND status = 'unknown'
				LIMIT ?)
			RETURNING item, attempt, failures, doubt`)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, req.Owner, until, now, key.Job, key.Period,
			key.Job, key.Period,
			key.Job, key.Period, now,
			key.Job, key.Period, now,
			req.TakeUnknown, key.Job, key.Period,
			req.N)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c ItemClaim
			if err := rows.Scan(&c.Item, &c.Attempt, &c.Failures, &c.Doubt); err != nil {
				return err
			}
			claims = append(claims, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, l.opErr("claim items", key, err)
	}
	return claims, nil
}

const finishItemSQL = `UPDATE idem_items SET status=?, failures=?, not_before=?, last_error=?, doubt=0,
	lease_until=0, updated=? WHERE job=? AND period=? AND item=? AND attempt=? AND status='running'`

// doneChunk is how many done marks one statement writes.
const doneChunk = 100

// doneItemsSQL marks up to doneChunk items done in one statement, each
// fenced by its attempt; it returns the items it marked.
var doneItemsSQL = func() string {
	var b strings.Builder
	b.WriteString(`UPDATE idem_items SET status='done', failures=0, not_before=0, last_error='', doubt=0,
		lease_until=0, updated=? WHERE job=? AND period=? AND status='running' AND (item, attempt) IN (VALUES `)
	for i := range doneChunk {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?)")
	}
	b.WriteString(`) RETURNING item`)
	return b.String()
}()

func finishItems(tx *wtx, key Key, ends []ItemEnd) (lost []string, err error) {
	var done []ItemEnd
	var other []ItemEnd
	for _, e := range ends {
		if e.Status == StatusDone {
			done = append(done, e)
		} else {
			other = append(other, e)
		}
	}
	// Done marks, the bulk of a batch: doneChunk to a statement.
	for len(done) > 0 {
		chunk := done[:min(doneChunk, len(done))]
		done = done[len(chunk):]
		if lost, err = finishDone(tx, key, chunk, lost); err != nil {
			return nil, err
		}
	}
	st, err := tx.stmt(finishItemSQL)
	if err != nil {
		return nil, err
	}
	for _, e := range other {
		res, err := st.ExecContext(tx.ctx, string(e.Status), e.Failures, micros(e.NotBefore), e.Error, micros(e.Now),
			key.Job, key.Period, e.Item, e.Attempt)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			lost = append(lost, e.Item)
		}
	}
	return lost, nil
}

// finishDone marks chunk (at most doneChunk items) done and appends the
// items whose attempt no longer held to lost.
func finishDone(tx *wtx, key Key, chunk []ItemEnd, lost []string) ([]string, error) {
	st, err := tx.stmt(doneItemsSQL)
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 2*doneChunk+3)
	args = append(args, micros(chunk[0].Now), key.Job, key.Period)
	for i := range doneChunk {
		e := chunk[min(i, len(chunk)-1)] // a short chunk repeats its last pair
		args = append(args, e.Item, e.Attempt)
	}
	rows, err := st.QueryContext(tx.ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	marked := make(map[string]bool, len(chunk))
	for rows.Next() {
		var it string
		if err := rows.Scan(&it); err != nil {
			return nil, err
		}
		marked[it] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, e := range chunk {
		if !marked[e.Item] {
			lost = append(lost, e.Item)
		}
	}
	return lost, nil
}

// FinishItems implements [ItemStore]: one transaction, synchronous=FULL.
func (l *Ledger) FinishItems(ctx context.Context, key Key, ends []ItemEnd) ([]string, error) {
	if len(ends) == 0 {
		return nil, nil
	}
	ctx = context.WithoutCancel(ctx)
	var lost []string
	err := l.withTx(ctx, true, func(tx *wtx) error {
		var err error
		lost, err = finishItems(tx, key, ends)
		return err
	})
	if err != nil {
		return nil, l.opErr("finish items", key, err)
	}
	return lost, nil
}

// FinishItemsTx implements [ItemTxStore]: the batch's items run in one
// SQLite transaction, each in a savepoint, and commit with synchronous=FULL.
func (l *Ledger) FinishItemsTx(ctx context.Context, key Key, claims []ItemClaim, now time.Time, fn func(*sql.Tx, ItemClaim) error) (map[string]error, []string, error) {
	var (
		failed map[string]error
		lost   []string
	)
	err := l.withTx(ctx, true, func(tx *wtx) error {
		failed, lost = map[string]error{}, nil
		fence, err := tx.stmt(`UPDATE idem_items SET updated=? WHERE job=? AND period=? AND item=? AND attempt=? AND status='running'`)
		if err != nil {
			return err
		}
		var done []ItemEnd
		for _, c := range claims {
			res, err := fence.ExecContext(ctx, micros(now), key.Job, key.Period, c.Item, c.Attempt)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				lost = append(lost, c.Item)
				continue
			}
			if _, err := tx.ExecContext(ctx, `SAVEPOINT idem_item`); err != nil {
				return err
			}
			if ferr := fn(tx.Tx, c); ferr != nil {
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO idem_item`); err != nil {
					return err
				}
				failed[c.Item] = ferr
			} else {
				done = append(done, ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: StatusDone, Now: now})
			}
			if _, err := tx.ExecContext(ctx, `RELEASE idem_item`); err != nil {
				return err
			}
		}
		if _, err := finishItems(tx, key, done); err != nil {
			return err
		}
		return Checkpoint(ctx, AfterFn, key)
	})
	if err != nil {
		return nil, nil, l.opErr("run items", key, err)
	}
	return failed, lost, nil
}
