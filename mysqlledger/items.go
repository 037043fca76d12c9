package mysqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// The items of idem.Each are recorded and claimed in chunks, as in idem's
// SQLite ledger: item_set holds one row per item (uniqueness), item_chunks
// one per chunk (its settled position, lease and attempt), item_lists the
// chunk's items (one BLOB, newline-separated: item ids hold no control
// characters), item_state the records of items whose attempt did not end
// done, itemsets whether a period's set is sealed. Leases and backoff
// deadlines are on the server's clock.

// listBytes bounds a chunk's item list and one INSERT's items, far below
// max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8.0 by default;
// a packet above it makes the server close the connection): a larger
// AddItems becomes several chunks.
const listBytes = 1 << 20

// addBatch is how many items one INSERT into item_set writes.
const addBatch = 500

// AddItems implements [idemstore.ItemStore]: under the lock of the period's
// row in itemsets (AddItems of one period take turns), the items not in
// item_set are inserted and form a new chunk (several, for a list above
// 1 MiB), in one transaction.
func (l *Ledger) AddItems(ctx context.Context, key idemstore.Key, items []string) error {
	if len(items) == 0 {
		return nil
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if sealed, err := l.lockItemSet(ctx, tx, key); err != nil || sealed {
			return err
		}
		return l.addItemsTx(ctx, tx, key, items)
	})
	if err != nil {
		return opErr("add items", key, err)
	}
	return nil
}

// lockItemSet locks the period's row in itemsets (FOR UPDATE, created if
// missing) in tx, and reports whether the set is sealed.
func (l *Ledger) lockItemSet(ctx context.Context, tx *sql.Tx, key idemstore.Key) (sealed bool, err error) {
	var s int
	err = lockOrCreate(ctx, tx, `SELECT sealed FROM `+l.t.itemsets+` WHERE job = ? AND period = ? FOR UPDATE`,
		[]any{key.Job, key.Period}, []any{&s},
		`INSERT IGNORE INTO `+l.t.itemsets+` (job, period, sealed) VALUES (?, ?, 0)`, []any{key.Job, key.Period})
	return s == 1, err
}

// addItemsTx is AddItems in tx, which holds the period's itemsets row: the
// items not in item_set are inserted there and form a new chunk (several,
// for a list above listBytes).
func (l *Ledger) addItemsTx(ctx context.Context, tx *sql.Tx, key idemstore.Key, items []string) error {
	fresh := make([]string, 0, len(items))
	seen := make(map[string]bool, len(items))
	for rest := items; len(rest) > 0; {
		batch := rest[:min(addBatch, len(rest))]
		rest = rest[len(batch):]
		var err error
		if fresh, err = l.addFresh(ctx, tx, key, batch, seen, fresh); err != nil {
			return err
		}
	}
	for _, c := range cutList(fresh) {
		if err := l.addChunk(ctx, tx, key, c); err != nil {
			return err
		}
	}
	return nil
}

// cutList cuts items into chunks whose lists (newline-separated) hold at
// most listBytes, or one item.
func cutList(items []string) [][]string {
	var chunks [][]string
	for len(items) > 0 {
		n, size := 0, 0
		for n < len(items) && (n == 0 || size+len(items[n])+1 <= listBytes) {
			size += len(items[n]) + 1
			n++
		}
		chunks = append(chunks, items[:n])
		items = items[n:]
	}
	return chunks
}

// addFresh inserts the items of batch that item_set lacks and appends them
// to fresh, in order, once each.
func (l *Ledger) addFresh(ctx context.Context, tx *sql.Tx, key idemstore.Key, batch []string, seen map[string]bool, fresh []string) ([]string, error) {
	args := []any{key.Job, key.Period}
	for _, it := range batch {
		args = append(args, it)
	}
	rows, err := tx.QueryContext(ctx, `SELECT item FROM `+l.t.itemSet+` WHERE job = ? AND period = ? AND item IN (`+marks(len(batch))+`)`, args...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var it string
		if err := rows.Scan(&it); err != nil {
			rows.Close()
			return nil, err
		}
		seen[it] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var vals []string
	args = args[:0]
	for _, it := range batch {
		if seen[it] {
			continue
		}
		seen[it] = true
		fresh = append(fresh, it)
		vals = append(vals, "(?, ?, ?)")
		args = append(args, key.Job, key.Period, it)
	}
	if len(vals) == 0 {
		return fresh, nil
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+l.t.itemSet+` (job, period, item) VALUES `+strings.Join(vals, ", "), args...)
	return fresh, err
}

// marks is n placeholders, comma-separated.
func marks(n int) string {
	if n == 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func (l *Ledger) addChunk(ctx context.Context, tx *sql.Tx, key idemstore.Key, items []string) error {
	var chunk int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(chunk), 0) + 1 FROM `+l.t.itemChunks+` WHERE job = ? AND period = ?`,
		key.Job, key.Period).Scan(&chunk); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.itemChunks+` (job, period, chunk, n, settled, started, doubt, status, attempt,
		failures, owner, lease_until, updated) VALUES (?, ?, ?, ?, 0, 0, 0, 'pending', 0, 0, '', 0, `+nowSQL+`)`,
		key.Job, key.Period, chunk, len(items)); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.itemLists+` (job, period, chunk, items) VALUES (?, ?, ?, ?)`,
		key.Job, key.Period, chunk, []byte(strings.Join(items, "\n")))
	return err
}

// SealItems implements [idemstore.ItemStore].
func (l *Ledger) SealItems(ctx context.Context, key idemstore.Key) error {
	_, err := l.exec(ctx, `INSERT INTO `+l.t.itemsets+` (job, period, sealed) VALUES (?, ?, 1)
		ON DUPLICATE KEY UPDATE sealed = 1`, key.Job, key.Period)
	if err != nil {
		return opErr("seal items", key, err)
	}
	return nil
}

// CountItems implements [idemstore.ItemStore] with two reads, without a
// transaction (each read sees what was committed when it ran, as in the
// READ COMMITTED transaction it would otherwise be): the seal and the
// chunks' counts, then the items that have records of their own. NextRetry
// and Now are the server's.
func (l *Ledger) CountItems(ctx context.Context, key idemstore.Key) (idemstore.ItemCounts, error) {
	var c idemstore.ItemCounts
	err := func(tx *sql.DB) error {
		var now, sealed int64
		var pending, running, settled sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT `+nowSQL+`,
				COALESCE((SELECT sealed FROM `+l.t.itemsets+` WHERE job = ? AND period = ?), 0),
				SUM(CASE WHEN status = 'pending' OR status = 'running' AND started <= settled THEN n - settled END),
				SUM(CASE WHEN status = 'running' AND started > settled THEN n - settled END),
				SUM(settled)
			FROM `+l.t.itemChunks+` WHERE job = ? AND period = ?`, key.Job, key.Period, key.Job, key.Period).Scan(&now, &sealed, &pending, &running, &settled); err != nil {
			return err
		}
		c.Sealed = sealed == 1
		c.Now = fromMicros(now)
		c.Pending, c.Running, c.Done = pending.Int64, running.Int64, settled.Int64
		rows, err := tx.QueryContext(ctx, `SELECT CASE WHEN status = 'failed' AND failures = 0 THEN 'pending' ELSE status END AS st,
				COUNT(*), SUM(chunk > 0), MIN(not_before) FROM `+l.t.itemState+`
			WHERE job = ? AND period = ? GROUP BY st`, key.Job, key.Period)
		if err != nil {
			return err
		}
		defer rows.Close()
		var own int64
		for rows.Next() {
			var status string
			var n, fromChunks, nb int64
			if err := rows.Scan(&status, &n, &fromChunks, &nb); err != nil {
				return err
			}
			own += fromChunks // counted in settled above; counted here by status
			switch idemstore.Status(status) {
			case "pending":
				c.Pending += n
			case idemstore.StatusRunning:
				c.Running += n
			case idemstore.StatusFailed:
				c.Failed, c.NextRetry = n, fromMicros(nb)
			case idemstore.StatusDone:
				c.Done += n
			case idemstore.StatusUnknown:
				c.Unknown = n
			case idemstore.StatusParked:
				c.Parked = n
			}
		}
		c.Done -= own
		return rows.Err()
	}(l.db)
	if err != nil {
		return idemstore.ItemCounts{}, opErr("count items", key, err)
	}
	return c, nil
}

// ClaimItems implements [idemstore.ItemStore]: in one transaction, on the
// server's clock, a runnable chunk (FOR UPDATE SKIP LOCKED: concurrent
// claimers take different chunks), else up to req.N runnable single
// items. When neither is found, the owners of the period's running work
// whose leases hold are checked with [idemstore.HolderGone], and the work
// of those whose process is gone is claimed as if their leases had expired.
func (l *Ledger) ClaimItems(ctx context.Context, key idemstore.Key, req idemstore.ItemClaimRequest) (idemstore.ItemBatch, error) {
	var b idemstore.ItemBatch
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		b = idemstore.ItemBatch{}
		var gone []string
		for checked := false; ; checked = true {
			ok, err := l.claimChunk(ctx, tx, key, req, gone, &b)
			if err != nil || ok {
				return err
			}
			if err := l.claimSingles(ctx, tx, key, req, gone, &b); err != nil || len(b.Items) > 0 || checked {
				return err
			}
			if gone, err = l.goneOwners(ctx, tx, key); err != nil || len(gone) == 0 {
				return err
			}
		}
	})
	if err != nil {
		return idemstore.ItemBatch{}, opErr("claim items", key, err)
	}
	return b, nil
}

// ownerIn is an SQL condition "owner is one of gone" and its arguments.
func ownerIn(gone []string) (string, []any) {
	if len(gone) == 0 {
		return "FALSE", nil
	}
	args := make([]any, len(gone))
	for i, g := range gone {
		args[i] = g
	}
	return "owner IN (" + marks(len(gone)) + ")", args
}

// claimChunk takes the first runnable chunk (FOR UPDATE SKIP LOCKED),
// read with its item list and the server's time in one statement, then
// written; ok is false when no chunk is runnable.
func (l *Ledger) claimChunk(ctx context.Context, tx *sql.Tx, key idemstore.Key, req idemstore.ItemClaimRequest, gone []string, b *idemstore.ItemBatch) (bool, error) {
	cond, gargs := ownerIn(gone)
	args := append([]any{key.Job, key.Period}, gargs...)
	var (
		now, chunk                           int64
		status                               string
		attempt                              int64
		settled, started, failures, n, doubt int
		items                                []byte
	)
	// The item list is read by a subquery: a consistent read, no lock (a
	// chunk's list is written once, with the chunk).
	err := tx.QueryRowContext(ctx, `SELECT `+nowSQL+`, c.chunk, c.status, c.attempt, c.settled, c.started, c.failures, c.n,
			(SELECT li.items FROM `+l.t.itemLists+` li WHERE li.job = c.job AND li.period = c.period AND li.chunk = c.chunk)
		FROM `+l.t.itemChunks+` c WHERE c.job = ? AND c.period = ?
		AND (c.status = 'pending' OR c.status = 'running' AND (c.lease_until <= `+nowSQL+` OR `+cond+`))
		ORDER BY c.chunk LIMIT 1 FOR UPDATE SKIP LOCKED`, args...).Scan(&now, &chunk, &status, &attempt, &settled, &started, &failures, &n, &items)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if items == nil {
		return false, fmt.Errorf("chunk %d has no item list", chunk)
	}
	// What the UPDATE below writes, as it writes it (the row is locked).
	if status == string(idemstore.StatusRunning) {
		doubt, failures = started, failures+1
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.itemChunks+` SET doubt = ?, failures = ?,
			status = 'running', attempt = ?, owner = ?, lease_until = ?, updated = ?,
			started = GREATEST(started, LEAST(settled + ?, n))
		WHERE job = ? AND period = ? AND chunk = ?`,
		doubt, failures, attempt+1, req.Owner, now+micros(req.Lease), now, max(req.N, 1), key.Job, key.Period, chunk); err != nil {
		return false, err
	}
	b.Chunk, b.Attempt, b.Pos = chunk, attempt+1, settled
	b.Items = chunkClaims(string(items), b.Attempt, b.Pos, doubt, failures)
	return true, nil
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

func (l *Ledger) claimSingles(ctx context.Context, tx *sql.Tx, key idemstore.Key, req idemstore.ItemClaimRequest, gone []string, b *idemstore.ItemBatch) error {
	cond, gargs := ownerIn(gone)
	args := append([]any{key.Job, key.Period}, gargs...)
	args = append(args, req.TakeUnknown, max(req.N, 1))
	// The server's time is read with the items (now: one value in one
	// statement), none of them if none is runnable.
	rows, err := tx.QueryContext(ctx, `SELECT `+nowSQL+`, item, status, attempt, failures, owner, lease_until, last_error FROM `+l.t.itemState+`
		WHERE job = ? AND period = ? AND (status = 'pending' OR status = 'failed' AND not_before <= `+nowSQL+`
			OR status = 'running' AND (lease_until <= `+nowSQL+` OR `+cond+`) OR ? AND status = 'unknown')
		ORDER BY item LIMIT ? FOR UPDATE SKIP LOCKED`, args...)
	if err != nil {
		return err
	}
	type found struct {
		idemstore.Record
		item string
	}
	var fs []found
	var now int64
	for rows.Next() {
		var f found
		var status string
		var lease int64
		if err := rows.Scan(&now, &f.item, &status, &f.Attempt, &f.Failures, &f.Owner, &lease, &f.LastError); err != nil {
			rows.Close()
			return err
		}
		f.Status, f.LeaseUntil = idemstore.Status(status), fromMicros(lease)
		fs = append(fs, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	at, until := fromMicros(now), now+micros(req.Lease)
	for _, f := range fs {
		doubt := f.Status == idemstore.StatusRunning || f.Status == idemstore.StatusUnknown
		rec := idemstore.TakenOver(f.Record, at)
		if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.itemState+` SET doubt = ?, failures = ?, last_error = ?, status = 'running',
			attempt = attempt + 1, owner = ?, lease_until = ?, updated = ? WHERE job = ? AND period = ? AND item = ?`,
			doubt, rec.Failures, rec.LastError, req.Owner, until, now, key.Job, key.Period, f.item); err != nil {
			return err
		}
		b.Items = append(b.Items, idemstore.ItemClaim{Item: f.item, Attempt: f.Attempt + 1, Failures: rec.Failures, Doubt: doubt})
	}
	return nil
}

// goneOwners returns the owners of key's running chunks and items whose
// leases hold on the server's clock and whose processes are gone.
func (l *Ledger) goneOwners(ctx context.Context, tx *sql.Tx, key idemstore.Key) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT owner FROM `+l.t.itemChunks+` WHERE job = ? AND period = ? AND status = 'running' AND lease_until > `+nowSQL+`
		UNION SELECT owner FROM `+l.t.itemState+` WHERE job = ? AND period = ? AND status = 'running' AND lease_until > `+nowSQL,
		key.Job, key.Period, key.Job, key.Period)
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

// onServer is t, a time on the caller's clock at which it was now, on the
// server's clock at serverNow; zero stays zero.
func onServer(t, now time.Time, serverNow int64) int64 {
	if t.IsZero() {
		return 0
	}
	return serverNow + micros(t.Sub(now))
}

// advanceChunk moves a chunk's settled position past n items, fenced by
// its attempt and position; ok is false when the chunk is no longer ours.
func (l *Ledger) advanceChunk(ctx context.Context, tx *sql.Tx, key idemstore.Key, step idemstore.ItemStep, n int, now int64) (bool, error) {
	settled := step.From + n
	res, err := tx.ExecContext(ctx, `UPDATE `+l.t.itemChunks+` SET settled = ?, started = GREATEST(started, LEAST(?, n)),
			lease_until = ?, updated = ?, status = IF(? >= n, 'done', 'running')
		WHERE job = ? AND period = ? AND chunk = ? AND attempt = ? AND status = 'running' AND settled = ?`,
		settled, settled+step.Next, onServer(step.LeaseUntil, step.Now, now), now, settled,
		key.Job, key.Period, step.Chunk, step.Attempt, step.From)
	if err != nil {
		return false, err
	}
	rows, err := res.RowsAffected() // settled moves by n > 0: the row changes
	return rows == 1, err
}

// ownRecords writes the records of a chunk's items whose attempt did not
// end done.
func (l *Ledger) ownRecords(ctx context.Context, tx *sql.Tx, key idemstore.Key, chunk int64, ends []idemstore.ItemEnd, now int64) error {
	for _, e := range ends {
		if e.Status == idemstore.StatusDone {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.itemState+` (job, period, item, chunk, status, attempt, failures, owner,
				lease_until, not_before, last_error, doubt, updated) VALUES (?, ?, ?, ?, ?, ?, ?, '', 0, ?, ?, 0, ?)`,
			key.Job, key.Period, e.Item, chunk, string(e.Status), e.Attempt, e.Failures, onServer(e.NotBefore, e.Now, now), e.Error, now); err != nil {
			return err
		}
	}
	return nil
}

// finishSingles records the ends of single items, each fenced by its
// attempt, and returns the items whose attempt no longer held.
func (l *Ledger) finishSingles(ctx context.Context, tx *sql.Tx, key idemstore.Key, ends []idemstore.ItemEnd, now int64) ([]string, error) {
	var lost []string
	for _, e := range ends {
		failures := e.Failures
		if e.Status == idemstore.StatusDone {
			failures = 0
		}
		res, err := tx.ExecContext(ctx, `UPDATE `+l.t.itemState+` SET status = ?, failures = ?, not_before = ?, last_error = ?, doubt = 0,
			lease_until = 0, updated = ? WHERE job = ? AND period = ? AND item = ? AND attempt = ? AND status = 'running'`,
			string(e.Status), failures, onServer(e.NotBefore, e.Now, now), e.Error, now, key.Job, key.Period, e.Item, e.Attempt)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 0 { // status leaves 'running': a match changes the row
			lost = append(lost, e.Item)
		}
	}
	return lost, nil
}

// allDone reports whether every end is done.
func allDone(ends []idemstore.ItemEnd) bool {
	for _, e := range ends {
		if e.Status != idemstore.StatusDone {
			return false
		}
	}
	return true
}

func serverNow(ctx context.Context, tx *sql.Tx) (int64, error) {
	var now int64
	err := tx.QueryRowContext(ctx, `SELECT `+nowSQL).Scan(&now)
	return now, err
}

// FinishItems implements [idemstore.ItemStore], in one transaction.
func (l *Ledger) FinishItems(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	if len(ends) == 0 {
		return nil, nil
	}
	if err := idemstore.CheckEnds(ends); err != nil {
		return nil, opErr("finish items", key, err)
	}
	ctx = context.WithoutCancel(ctx)
	if step.Chunk != 0 && allDone(ends) {
		// The window's done marks alone: one autocommitted UPDATE of the
		// chunk's row, fenced by its WHERE clause.
		res, err := l.exec(ctx, `UPDATE `+l.t.itemChunks+` SET settled = ?, started = GREATEST(started, LEAST(?, n)),
				lease_until = CASE WHEN ? THEN 0 ELSE `+nowSQL+` + ? END, updated = `+nowSQL+`, status = IF(? >= n, 'done', 'running')
			WHERE job = ? AND period = ? AND chunk = ? AND attempt = ? AND status = 'running' AND settled = ?`,
			step.From+len(ends), step.From+len(ends)+step.Next, step.LeaseUntil.IsZero(), micros(step.LeaseUntil.Sub(step.Now)), step.From+len(ends),
			key.Job, key.Period, step.Chunk, step.Attempt, step.From)
		if err != nil {
			return nil, opErr("finish items", key, err)
		}
		if n, err := res.RowsAffected(); err != nil { // settled moves by len(ends) > 0: a match changes the row
			return nil, opErr("finish items", key, err)
		} else if n == 0 {
			return idemstore.EndItems(ends), nil
		}
		return nil, nil
	}
	var lost []string
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		lost = nil
		now, err := serverNow(ctx, tx)
		if err != nil {
			return err
		}
		if step.Chunk == 0 {
			lost, err = l.finishSingles(ctx, tx, key, ends, now)
			return err
		}
		ok, err := l.advanceChunk(ctx, tx, key, step, len(ends), now)
		if err != nil {
			return err
		}
		if !ok {
			lost = idemstore.EndItems(ends)
			return nil
		}
		return l.ownRecords(ctx, tx, key, step.Chunk, ends, now)
	})
	if err != nil {
		return nil, opErr("finish items", key, err)
	}
	return lost, nil
}

// FinishItemsTx implements [idemstore.ItemTxStore] with *sql.Tx: the
// window runs in one READ COMMITTED transaction
// ([idemstore.RunItemWindow]), each item in a savepoint.
func (l *Ledger) FinishItemsTx(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim, fn func(*sql.Tx, idemstore.ItemClaim) error, failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
	if len(claims) == 0 {
		return nil, nil, nil
	}
	tx, err := l.db.BeginTx(ctx, txOpts)
	if err != nil {
		return nil, nil, opErr("run items", key, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	now, err := serverNow(ctx, tx)
	if err != nil {
		return nil, nil, opErr("run items", key, err)
	}
	ends, lost, err := idemstore.RunItemWindow(ctx, &itemWindow{l: l, tx: tx, now: now}, key, step, claims, fn, failed)
	if err != nil {
		return nil, nil, opErr("run items", key, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, opErr("run items: commit", key, err)
	}
	return ends, lost, nil
}

// itemWindow is a window of FinishItemsTx ([idemstore.ItemWindow]).
type itemWindow struct {
	l    *Ledger
	tx   *sql.Tx
	now  int64
	open bool
}

func (w *itemWindow) Tx() *sql.Tx { return w.tx }

// Fence moves a chunk forward past the window at once (the transaction
// commits it with the ends, or not at all); single items' records are
// locked (FOR UPDATE), fenced by their attempts.
func (w *itemWindow) Fence(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, claims []idemstore.ItemClaim) ([]string, error) {
	var lost []string
	if step.Chunk != 0 {
		ok, err := w.l.advanceChunk(ctx, w.tx, key, step, len(claims), w.now)
		if err != nil || ok {
			return nil, err
		}
		for _, c := range claims {
			lost = append(lost, c.Item)
		}
		return lost, nil
	}
	for _, c := range claims {
		var one int
		err := w.tx.QueryRowContext(ctx, `SELECT 1 FROM `+w.l.t.itemState+` WHERE job = ? AND period = ? AND item = ? AND attempt = ?
			AND status = 'running' FOR UPDATE`, key.Job, key.Period, c.Item, c.Attempt).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			lost = append(lost, c.Item)
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	return lost, nil
}

func (w *itemWindow) Savepoint(ctx context.Context) error {
	if w.open {
		if _, err := w.tx.ExecContext(ctx, `RELEASE SAVEPOINT idem_item`); err != nil {
			return err
		}
	}
	_, err := w.tx.ExecContext(ctx, `SAVEPOINT idem_item`)
	w.open = err == nil
	return err
}

func (w *itemWindow) RollbackTo(ctx context.Context) error {
	_, err := w.tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT idem_item`)
	return err
}

func (w *itemWindow) Record(ctx context.Context, key idemstore.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) error {
	if step.Chunk != 0 {
		return w.l.ownRecords(ctx, w.tx, key, step.Chunk, ends, w.now)
	}
	lost, err := w.l.finishSingles(ctx, w.tx, key, ends, w.now)
	if err == nil && len(lost) > 0 {
		err = fmt.Errorf("items %q no longer held under the fence", lost)
	}
	return err
}
