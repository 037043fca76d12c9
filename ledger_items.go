package idem

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

var (
	_ idemstore.ItemStore            = ledgerStore{}
	_ idemstore.ItemTxStore[*sql.Tx] = ledgerStore{}
)

// addChunk is how many rows one INSERT into the item set writes.
const addChunk = 500

// addItemsSQL inserts a batch of items (a JSON array) into the item set,
// returning the ones that were not there if returning. One JSON string
// binds faster than three parameters a row.
func addItemsSQL(returning bool) string {
	q := `INSERT INTO idem_item_set(job, period, item) SELECT ?, ?, value FROM json_each(?) WHERE true ON CONFLICT DO NOTHING`
	if returning {
		q += ` RETURNING item`
	}
	return q
}

// jsonStrings encodes item ids as a JSON array. Item ids are valid UTF-8
// without control characters (see validPart), so only '"' and '\\' need
// escaping.
func jsonStrings(items []string) string {
	n := 2
	for _, it := range items {
		n += len(it) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for j := 0; j < len(it); j++ {
			if c := it[j]; c == '"' || c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, it[j])
		}
		b = append(b, '"')
	}
	return string(append(b, ']'))
}

// addFresh inserts batch into the item set and appends the items that were
// not there to fresh. The common case, every item new, is one INSERT; when
// some were there (the set generated again after a crash), it is rolled back
// and done again with RETURNING, which names the new ones.
func addFresh(tx *wtx, key Key, batch []string, fresh []string) ([]string, error) {
	list := jsonStrings(batch)
	if _, err := tx.exec(`SAVEPOINT idem_add`); err != nil {
		return nil, err
	}
	res, err := tx.exec(addItemsSQL(false), key.Job, key.Period, list)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, err
	} else if n == int64(len(batch)) {
		_, err := tx.exec(`RELEASE idem_add`)
		return append(fresh, batch...), err
	}
	if _, err := tx.exec(`ROLLBACK TO idem_add`); err != nil {
		return nil, err
	}
	if _, err := tx.exec(`RELEASE idem_add`); err != nil {
		return nil, err
	}
	st, err := tx.stmt(addItemsSQL(true))
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(tx.ctx, key.Job, key.Period, list)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var it string
		if err := rows.Scan(&it); err != nil {
			return nil, err
		}
		fresh = append(fresh, it)
	}
	return fresh, rows.Err()
}

// AddItems implements [idemstore.ItemStore]: the items go into the item set
// with multi-row INSERT ... ON CONFLICT DO NOTHING RETURNING, and the ones that
// were new form one chunk, all in one transaction (not synced: SealItems syncs
// it with the seal).
func (l ledgerStore) AddItems(ctx context.Context, key Key, items []string) error {
	if len(items) == 0 {
		return nil
	}
	err := l.withTx(ctx, false, func(tx *wtx) error {
		// The first statement writes (see withTx); it also refuses a sealed set.
		res, err := tx.exec(`INSERT INTO idem_itemsets(job, period, sealed) VALUES(?, ?, 0)
			ON CONFLICT(job, period) DO UPDATE SET sealed = sealed WHERE sealed = 0`, key.Job, key.Period)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 { // sealed: the set is complete
			return nil
		}
		fresh := make([]string, 0, len(items))
		for rest := items; len(rest) > 0; {
			batch := rest[:min(addChunk, len(rest))]
			rest = rest[len(batch):]
			if fresh, err = addFresh(tx, key, batch, fresh); err != nil {
				return err
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		var chunk int64
		if err := tx.queryRow(`INSERT INTO idem_item_chunks(job, period, chunk, n, updated)
				SELECT ?1, ?2, coalesce(max(chunk), 0) + 1, ?3, ?4 FROM idem_item_chunks WHERE job = ?1 AND period = ?2
				RETURNING chunk`,
			key.Job, key.Period, len(fresh), micros(time.Now())).Scan(&chunk); err != nil {
			return err
		}
		_, err = tx.exec(`INSERT INTO idem_item_lists(job, period, chunk, items) VALUES(?, ?, ?, ?)`,
			key.Job, key.Period, chunk, strings.Join(fresh, "\n"))
		return err
	})
	if err != nil {
		return l.opErr("add items", key, err)
	}
	return nil
}

// SealItems implements [idemstore.ItemStore].
func (l ledgerStore) SealItems(ctx context.Context, key Key) error {
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

// CountItems implements [idemstore.ItemStore]. An item of a chunk counts as the
// chunk's status until the chunk settles it: done, or a record of its own. A
// running chunk with no item marked started past its settled ones (handed
// back by a deferred call) counts as pending, and so does a failed item that
// never failed (handed back).
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
		var pending, running, settled, own sql.NullInt64
		if err := l.queryRow(ctx, `SELECT
				sum(CASE WHEN status = 'pending' OR status = 'running' AND started <= settled THEN n - settled END),
				sum(CASE WHEN status = 'running' AND started > settled THEN n - settled END),
				sum(settled)
			FROM idem_item_chunks WHERE job=? AND period=?`, key.Job, key.Period).Scan(&pending, &running, &settled); err != nil {
			return err
		}
		c.Pending, c.Running, c.Done = pending.Int64, running.Int64, settled.Int64
		// A failed item that never failed (failures 0) was handed back
		// by a deferred call: pending.
		rows, err := l.db.QueryContext(ctx, `SELECT CASE WHEN status = 'failed' AND failures = 0 THEN 'pending' ELSE status END AS st,
				count(*), sum(chunk > 0), min(not_before) FROM idem_item_state
			WHERE job=? AND period=? GROUP BY st`, key.Job, key.Period)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var status string
			var n, fromChunks, nb int64
			if err := rows.Scan(&status, &n, &fromChunks, &nb); err != nil {
				return err
			}
			own.Int64 += fromChunks // counted in settled above; counted here by status
			switch Status(status) {
			case "pending":
				c.Pending += n
			case StatusRunning:
				c.Running += n
			case StatusFailed:
				c.Failed, c.NextRetry = n, fromMicros(nb)
			case StatusDone:
				c.Done += n
			case StatusUnknown:
				c.Unknown = n
			case StatusParked:
				c.Parked = n
			}
		}
		c.Done -= own.Int64
		return rows.Err()
	})
	if err != nil {
		return ItemCounts{}, l.opErr("count items", key, err)
	}
	return c, nil
}

// claimChunkSQL takes one runnable chunk: pending, or running with an
// expired lease or held by an owner of ?7, a JSON array of owners whose
// processes are gone (then the abandoned attempt's started items are in
// doubt).
const claimChunkSQL = `UPDATE idem_item_chunks SET
		doubt = CASE WHEN status = 'running' THEN started ELSE 0 END,
		failures = failures + (status = 'running'),
		status = 'running', attempt = attempt + 1, owner = ?1, lease_until = ?2, updated = ?3,
		started = max(started, min(settled + ?4, n)) -- never less: an abandoned attempt's doubt stays
	WHERE job = ?5 AND period = ?6 AND chunk = (
		SELECT chunk FROM idem_item_chunks WHERE job = ?5 AND period = ?6 AND status = 'pending'
		UNION ALL
		SELECT chunk FROM idem_item_chunks WHERE job = ?5 AND period = ?6 AND status = 'running' AND lease_until <= ?3
		UNION ALL
		SELECT chunk FROM idem_item_chunks WHERE job = ?5 AND period = ?6 AND status = 'running'
			AND owner IN (SELECT value FROM json_each(?7))
		LIMIT 1)
	RETURNING chunk, attempt, settled, doubt, failures`

// claimSingleSQL takes up to N runnable items that have records of their
// own; ?8 is a JSON array of owners whose processes are gone. The note of
// an abandoned attempt is ?9 (idemstore.NoteDied) or ?10
// (idemstore.NoteExpired), filled in with its attempt, owner and lease end.
const claimSingleSQL = `UPDATE idem_item_state SET
		doubt = (status IN ('running', 'unknown')),
		failures = failures + (status = 'running'),
		last_error = CASE WHEN status = 'running'
			THEN printf(CASE WHEN lease_until > ?3 THEN ?9 ELSE ?10 END, attempt, owner,
				strftime('%Y-%m-%dT%H:%M:%S', lease_until / 1000000, 'unixepoch') || printf('.%06dZ', lease_until % 1000000))
			ELSE last_error END,
		status = 'running', attempt = attempt + 1, owner = ?1, lease_until = ?2, updated = ?3
	WHERE job = ?4 AND period = ?5 AND item IN (
		-- One index range (job, period, status) per branch: an OR over
		-- statuses would scan every record of the period.
		SELECT item FROM idem_item_state WHERE job = ?4 AND period = ?5 AND status = 'pending'
		UNION ALL
		SELECT item FROM idem_item_state WHERE job = ?4 AND period = ?5 AND status = 'failed' AND not_before <= ?3
		UNION ALL
		SELECT item FROM idem_item_state WHERE job = ?4 AND period = ?5 AND status = 'running' AND lease_until <= ?3
		UNION ALL
		SELECT item FROM idem_item_state WHERE job = ?4 AND period = ?5 AND status = 'running' AND lease_until > ?3
			AND owner IN (SELECT value FROM json_each(?8))
		UNION ALL
		SELECT item FROM idem_item_state WHERE ?6 AND job = ?4 AND period = ?5 AND status = 'unknown'
		LIMIT ?7)
	RETURNING item, attempt, failures, doubt`

// ClaimItems implements [idemstore.ItemStore]: one UPDATE ... RETURNING for a
// chunk, else one for single items, under SQLite's write lock. When neither
// finds work, the owners of the period's running chunks and items whose leases
// have not expired are checked with [idemstore.HolderGone], and the work of
// those whose process is gone is claimed as if their leases had expired.
func (l ledgerStore) ClaimItems(ctx context.Context, key Key, req idemstore.ItemClaimRequest) (idemstore.ItemBatch, error) {
	var b idemstore.ItemBatch
	err := l.withTx(ctx, req.Durable, func(tx *wtx) error {
		b = idemstore.ItemBatch{}
		at := tx.at(req.Now) // the lease counts from when it is written
		now, until := micros(at), micros(at.Add(req.Lease))
		for dead := "[]"; ; {
			var doubt, failures int
			var items string
			err := tx.queryRow(claimChunkSQL, req.Owner, until, now, max(req.N, 1), key.Job, key.Period, dead).
				Scan(&b.Chunk, &b.Attempt, &b.Pos, &doubt, &failures)
			if err == nil {
				if err := tx.queryRow(`SELECT items FROM idem_item_lists WHERE job=? AND period=? AND chunk=?`,
					key.Job, key.Period, b.Chunk).Scan(&items); err != nil {
					return fmt.Errorf("chunk %d's item list: %w", b.Chunk, err)
				}
				b.Items = chunkClaims(items, b.Attempt, b.Pos, doubt, failures)
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err := claimSingles(tx, key, req, now, until, dead, &b); err != nil || len(b.Items) > 0 || dead != "[]" {
				return err
			}
			gone, err := goneOwners(tx, key, now)
			if err != nil || len(gone) == 0 {
				return err
			}
			list, err := json.Marshal(gone)
			if err != nil {
				return err
			}
			dead = string(list)
		}
	})
	if err != nil {
		return idemstore.ItemBatch{}, l.opErr("claim items", key, err)
	}
	return b, nil
}

// claimSingles takes up to req.N single items into b.
func claimSingles(tx *wtx, key Key, req idemstore.ItemClaimRequest, now, until int64, dead string, b *idemstore.ItemBatch) error {
	st, err := tx.stmt(claimSingleSQL)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(tx.ctx, req.Owner, until, now, key.Job, key.Period, req.TakeUnknown, max(req.N, 1), dead,
		idemstore.NoteDied, idemstore.NoteExpired)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c idemstore.ItemClaim
		if err := rows.Scan(&c.Item, &c.Attempt, &c.Failures, &c.Doubt); err != nil {
			return err
		}
		b.Items = append(b.Items, c)
	}
	return rows.Err()
}

// goneOwners returns the owners of key's running chunks and items whose
// leases have not expired at now and whose processes are gone
// ([idemstore.HolderGone]).
func goneOwners(tx *wtx, key Key, now int64) ([]string, error) {
	st, err := tx.stmt(`SELECT owner FROM idem_item_chunks WHERE job = ?1 AND period = ?2 AND status = 'running' AND lease_until > ?3
		UNION
		SELECT owner FROM idem_item_state WHERE job = ?1 AND period = ?2 AND status = 'running' AND lease_until > ?3`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(tx.ctx, key.Job, key.Period, now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gone []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		if idemstore.HolderGone(o) {
			gone = append(gone, o)
		}
	}
	return gone, rows.Err()
}

// chunkClaims turns a claimed chunk's item list into the claims of its
// unsettled items: those before doubt (the abandoned attempt's started
// mark) are in doubt.
func chunkClaims(items string, attempt int64, settled, doubt, failures int) []idemstore.ItemClaim {
	ids := strings.Split(items, "\n")
	if settled >= len(ids) {
		return nil
	}
	claims := make([]idemstore.ItemClaim, 0, len(ids)-settled)
	for pos := settled; pos < len(ids); pos++ {
		c := idemstore.ItemClaim{Item: ids[pos], Attempt: attempt}
		if pos < doubt {
			c.Doubt, c.Failures = true, failures
		}
		claims = append(claims, c)
	}
	return claims
}

// advanceChunk moves a chunk's settled position past n items, fenced by
// its attempt and position; ok is false when the chunk is no longer ours.
func advanceChunk(tx *wtx, key Key, step idemstore.ItemStep, n int) (ok bool, err error) {
	settled := step.From + n
	res, err := tx.exec(`UPDATE idem_item_chunks SET settled = ?1, started = max(started, min(?2, n)), lease_until = ?3, updated = ?4,
			status = CASE WHEN ?1 >= n THEN 'done' ELSE 'running' END
		WHERE job = ?5 AND period = ?6 AND chunk = ?7 AND attempt = ?8 AND status = 'running' AND settled = ?9`,
		settled, settled+step.Next, micros(tx.at(step.LeaseUntil)), micros(tx.at(step.Now)),
		key.Job, key.Period, step.Chunk, step.Attempt, step.From)
	if err != nil {
		return false, err
	}
	rows, err := res.RowsAffected()
	return rows == 1, err
}

// ownRecords writes the records of a chunk's items whose attempt did not
// end done.
func ownRecords(tx *wtx, key Key, chunk int64, ends []idemstore.ItemEnd) error {
	for _, e := range ends {
		if e.Status == StatusDone {
			continue
		}
		if _, err := tx.exec(`INSERT INTO idem_item_state(job, period, item, chunk, status, attempt, failures, not_before, last_error, updated)
				VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			key.Job, key.Period, e.Item, chunk, string(e.Status), e.Attempt, e.Failures, micros(e.NotBefore), e.Error, micros(e.Now)); err != nil {
			return err
		}
	}
	return nil
}

const finishItemSQL = `UPDATE idem_item_state SET status=?, failures=?, not_before=?, last_error=?, doubt=0,
	lease_until=0, updated=? WHERE job=? AND period=? AND item=? AND attempt=? AND status='running'`

// finishSingle records the ends of single items, each fenced by its
// attempt, and returns the items whose attempt no longer held.
func finishSingle(tx *wtx, key Key, ends []idemstore.ItemEnd) (lost []string, err error) {
	st, err := tx.stmt(finishItemSQL)
	if err != nil {
		return nil, err
	}
	for _, e := range ends {
		failures := e.Failures
		if e.Status == StatusDone {
			failures = 0
		}
		res, err := st.ExecContext(tx.ctx, string(e.Status), failures, micros(e.NotBefore), e.Error, micros(e.Now),
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

// FinishItems implements [idemstore.ItemStore]: one transaction,
// synchronous=FULL. A chunk's window costs one UPDATE of the chunk's row, plus
// an INSERT per item that did not end done.
func (l ledgerStore) FinishItems(ctx context.Context, key Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	if len(ends) == 0 {
		return nil, nil
	}
	if err := idemstore.CheckEnds(ends); err != nil {
		return nil, l.opErr("finish items", key, err)
	}
	ctx = context.WithoutCancel(ctx)
	var lost []string
	err := l.withTx(ctx, true, func(tx *wtx) error {
		lost = nil
		if step.Chunk == 0 {
			var err error
			lost, err = finishSingle(tx, key, ends)
			return err
		}
		ok, err := advanceChunk(tx, key, step, len(ends))
		if err != nil {
			return err
		}
		if !ok {
			lost = idemstore.EndItems(ends)
			return nil
		}
		return ownRecords(tx, key, step.Chunk, ends)
	})
	if err != nil {
		return nil, l.opErr("finish items", key, err)
	}
	return lost, nil
}

// FinishItemsTx implements [idemstore.ItemTxStore]: the window runs in one
// SQLite transaction ([idemstore.RunItemWindow]), each item in a savepoint,
// and commits with synchronous=FULL. The transaction holds SQLite's write
// lock from its first statement, the fence, until it ends.
func (l ledgerStore) FinishItemsTx(ctx context.Context, key Key, step idemstore.ItemStep, claims []idemstore.ItemClaim, fn func(*sql.Tx, idemstore.ItemClaim) error, failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
	if len(claims) == 0 {
		return nil, nil, nil
	}
	var (
		ends []idemstore.ItemEnd
		lost []string
	)
	err := l.withSQLTx(ctx, true, func(tx *wtx) (err error) {
		ends, lost, err = idemstore.RunItemWindow(ctx, &itemWindow{tx: tx}, key, step, claims, fn, failed)
		return err
	})
	if err != nil {
		return nil, nil, l.opErr("run items", key, err)
	}
	return ends, lost, nil
}

// itemWindow is a window of FinishItemsTx in a SQLite transaction
// ([idemstore.ItemWindow]).
type itemWindow struct {
	tx   *wtx
	open bool // an item's savepoint is open
}

func (w *itemWindow) Tx() *sql.Tx { return w.tx.Tx }

// Fence moves a chunk forward past the window at once (the transaction
// commits it with the ends, or not at all), fenced by its attempt and
// position; a single item's record is touched, fenced by its attempt.
func (w *itemWindow) Fence(ctx context.Context, key Key, step idemstore.ItemStep, claims []idemstore.ItemClaim) ([]string, error) {
	var lost []string
	if step.Chunk != 0 {
		ok, err := advanceChunk(w.tx, key, step, len(claims))
		if err != nil || ok {
			return nil, err
		}
		for _, c := range claims {
			lost = append(lost, c.Item)
		}
		return lost, nil
	}
	fence, err := w.tx.stmt(`UPDATE idem_item_state SET updated=? WHERE job=? AND period=? AND item=? AND attempt=? AND status='running'`)
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		res, err := fence.ExecContext(ctx, micros(step.Now), key.Job, key.Period, c.Item, c.Attempt)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			lost = append(lost, c.Item)
		}
	}
	return lost, nil
}

func (w *itemWindow) Savepoint(ctx context.Context) error {
	if w.open {
		if _, err := w.tx.exec(`RELEASE idem_item`); err != nil {
			return err
		}
	}
	_, err := w.tx.exec(`SAVEPOINT idem_item`)
	w.open = err == nil
	return err
}

func (w *itemWindow) RollbackTo(ctx context.Context) error {
	_, err := w.tx.exec(`ROLLBACK TO idem_item`)
	return err
}

// Record writes the records of the chunk's items that did not end done
// (the chunk moved in Fence), or the single items' ends.
func (w *itemWindow) Record(ctx context.Context, key Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) error {
	if step.Chunk != 0 {
		return ownRecords(w.tx, key, step.Chunk, ends)
	}
	_, err := finishSingle(w.tx, key, ends)
	return err
}
