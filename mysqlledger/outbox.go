package mysqlledger

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

// The outbox (outbox.Put, idem.Relay): one row per message in table
// outbox, seq its order. An AUTO_INCREMENT value is taken at INSERT, not
// at commit, so PutOutbox first locks the topic's row in outbox_topics
// until its transaction ends: the messages of one topic are inserted one
// transaction at a time, and seq order is commit order within a topic.
// Its times are the caller's (the relay's clock), as the OutboxStore
// interface says.

const outboxCols = `seq, id, topic, payload, headers, job, period, item, status, attempts, token, owner, lease_until, not_before, last_error, created, delivered`

func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "", nil
	}
	b, err := json.Marshal(h)
	return string(b), err
}

func decodeHeaders(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("headers %q: %w", s, err)
	}
	return h, nil
}

// PutOutbox implements [idemstore.OutboxTxStore] with *sql.Tx.
func (l *Ledger) PutOutbox(ctx context.Context, tx *sql.Tx, msgs []idemstore.OutboxMessage) error {
	locked := map[string]bool{}
	for _, m := range msgs {
		if !locked[m.Topic] {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.outboxTopics+` (topic, puts) VALUES (?, 1)
				ON DUPLICATE KEY UPDATE puts = puts + 1`, m.Topic); err != nil {
				return err
			}
			locked[m.Topic] = true
		}
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return err
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO `+l.t.outbox+` (id, topic, payload, headers, job, period, item, created, status,
			attempts, token, owner, lease_until, not_before, last_error, delivered)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, 0, '', 0, 0, '', 0)`,
			m.ID, m.Topic, payload, h, m.Key.Job, m.Key.Period, m.Item, m.Created.UnixMicro())
		if errno(err) == erDupEntry {
			return fmt.Errorf("message id %s is already in the outbox: %w", m.ID, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func scanOutbox(scan func(...any) error) (idemstore.OutboxRecord, error) {
	var r idemstore.OutboxRecord
	var headers, status string
	var lease, notBefore, created, delivered int64
	err := scan(&r.Seq, &r.ID, &r.Topic, &r.Payload, &headers, &r.Key.Job, &r.Key.Period, &r.Item, &status,
		&r.Attempts, &r.Token, &r.Owner, &lease, &notBefore, &r.LastError, &created, &delivered)
	if err != nil {
		return r, err
	}
	if r.Headers, err = decodeHeaders(headers); err != nil {
		return r, fmt.Errorf("outbox message %s: %w", r.ID, err)
	}
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	r.Status = idemstore.OutboxStatus(status)
	r.LeaseUntil, r.NotBefore, r.Delivered = fromMicros(lease), fromMicros(notBefore), fromMicros(delivered)
	r.Created = time.UnixMicro(created).UTC()
	return r, nil
}

func queryOutbox(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string, args ...any) ([]idemstore.OutboxRecord, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []idemstore.OutboxRecord
	for rows.Next() {
		r, err := scanOutbox(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ClaimOutbox implements [idemstore.OutboxStore]: the first pending
// message of each topic, if due and not leased, locked FOR UPDATE SKIP
// LOCKED (concurrent relays take different messages), then leased, in one
// transaction. Runs (OutboxClaimRequest.Run) are not taken: only heads.
func (l *Ledger) ClaimOutbox(ctx context.Context, req idemstore.OutboxClaimRequest) ([]idemstore.OutboxRecord, error) {
	if req.N <= 0 {
		return nil, nil
	}
	now := req.Now.UnixMicro()
	var out []idemstore.OutboxRecord
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `SELECT o.seq FROM `+l.t.outbox+` o
			JOIN (SELECT topic, MIN(seq) AS seq FROM `+l.t.outbox+` WHERE status = 'pending' GROUP BY topic) h ON h.seq = o.seq
			WHERE o.lease_until <= ? AND o.not_before <= ? ORDER BY o.seq LIMIT ? FOR UPDATE SKIP LOCKED`, now, now, req.N)
		if err != nil {
			return err
		}
		var seqs []any
		for rows.Next() {
			var s int64
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return err
			}
			seqs = append(seqs, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(seqs) == 0 {
			return err
		}
		// Read again under the lock: still pending, due and not leased.
		args := append([]any{req.Owner, req.Now.Add(req.Lease).UnixMicro(), now, now}, seqs...)
		if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.outbox+` SET attempts = attempts + 1, token = token + 1,
			owner = ?, lease_until = ? WHERE status = 'pending' AND lease_until <= ? AND not_before <= ? AND seq IN (`+marks(len(seqs))+`)`, args...); err != nil {
			return err
		}
		args = append([]any{req.Owner}, seqs...)
		out, err = queryOutbox(ctx, tx, `SELECT `+outboxCols+` FROM `+l.t.outbox+` WHERE owner = ? AND seq IN (`+marks(len(seqs))+`) ORDER BY seq`, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mysqlledger: claim outbox messages: %w", err)
	}
	return out, nil
}

// ReleaseOutbox implements [idemstore.OutboxReleaser]: each claim still
// the latest is given back (its lease released, its attempt uncounted).
func (l *Ledger) ReleaseOutbox(ctx context.Context, claims []idemstore.OutboxClaimed) error {
	if len(claims) == 0 {
		return nil
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		for _, c := range claims {
			if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.outbox+` SET attempts = attempts - 1, lease_until = 0
				WHERE id = ? AND token = ? AND status = 'pending'`, c.ID, c.Token); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mysqlledger: release outbox claims: %w", err)
	}
	return nil
}

// outboxEnd runs a fenced end of a message's claim.
func (l *Ledger) outboxEnd(ctx context.Context, what, id string, token int64, q string, args ...any) error {
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+l.t.outbox+` WHERE id = ? AND token = ? AND status = 'pending' FOR UPDATE`, id, token).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: outbox message %s: its claim %d is no longer the latest (its lease ran out and another relay took it, or it was dropped or settled); %s refused",
				idemstore.ErrLeaseLost, id, token, what)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil && !errors.Is(err, idemstore.ErrLeaseLost) {
		return fmt.Errorf("mysqlledger: outbox message %s: %s: %w", id, what, err)
	}
	return err
}

// DeliveredOutbox implements [idemstore.OutboxStore].
func (l *Ledger) DeliveredOutbox(ctx context.Context, id string, token int64, now time.Time) error {
	return l.outboxEnd(ctx, "delivered mark", id, token,
		`UPDATE `+l.t.outbox+` SET status = 'delivered', delivered = ?, lease_until = 0, last_error = '' WHERE id = ?`, now.UnixMicro(), id)
}

// FailOutbox implements [idemstore.OutboxStore].
func (l *Ledger) FailOutbox(ctx context.Context, id string, token int64, f idemstore.OutboxFailure) error {
	status := idemstore.OutboxPending
	if f.Park {
		status = idemstore.OutboxParked
	}
	var nb int64
	if !f.NotBefore.IsZero() {
		nb = f.NotBefore.UnixMicro()
	}
	return l.outboxEnd(ctx, "failure record", id, token,
		`UPDATE `+l.t.outbox+` SET status = ?, not_before = ?, lease_until = 0, last_error = ? WHERE id = ?`, string(status), nb, f.Error, id)
}

// ListOutbox implements [idemstore.OutboxStore].
func (l *Ledger) ListOutbox(ctx context.Context, f idemstore.OutboxFilter) ([]idemstore.OutboxRecord, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"topic", f.Topic}, {"status", string(f.Status)}, {"id", f.ID}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	q := `SELECT ` + outboxCols + ` FROM ` + l.t.outbox
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	out, err := queryOutbox(ctx, l.db, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysqlledger: list outbox: %w", err)
	}
	return out, nil
}

// RetryOutbox implements [idemstore.OutboxStore].
func (l *Ledger) RetryOutbox(ctx context.Context, id string, now time.Time) error {
	return l.outboxOp(ctx, "retry", id, `UPDATE `+l.t.outbox+` SET status = 'pending', attempts = 0, not_before = ?, lease_until = 0
		WHERE id = ? AND status = 'parked'`, now.UnixMicro(), id)
}

// DropOutbox implements [idemstore.OutboxStore].
func (l *Ledger) DropOutbox(ctx context.Context, id string) error {
	return l.outboxOp(ctx, "drop", id, `DELETE FROM `+l.t.outbox+` WHERE id = ?`, id)
}

func (l *Ledger) outboxOp(ctx context.Context, op, id, q string, args ...any) error {
	res, err := l.exec(ctx, q, args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		return fmt.Errorf("mysqlledger: %s outbox message %s: %w", op, id, err)
	case n == 0:
		what := "no message"
		if op == "retry" {
			what = "no parked message"
		}
		return fmt.Errorf("%w: %s: the outbox has %s with id %s; nothing was written", idemstore.ErrMessageNotFound, op, what, id)
	}
	return nil
}

// PruneOutbox implements [idemstore.OutboxStore].
func (l *Ledger) PruneOutbox(ctx context.Context, before time.Time) (int64, error) {
	res, err := l.exec(ctx, `DELETE FROM `+l.t.outbox+` WHERE status = 'delivered' AND delivered < ?`, before.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("mysqlledger: prune outbox: %w", err)
	}
	return res.RowsAffected()
}

// OutboxStats implements [idemstore.OutboxStore].
func (l *Ledger) OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT topic,
			SUM(status = 'pending'),
			COALESCE(MIN(CASE WHEN status = 'pending' THEN created END), 0),
			SUM(status = 'delivered'),
			SUM(status = 'pending' AND last_error <> ''),
			SUM(status = 'parked')
		FROM `+l.t.outbox+` GROUP BY topic ORDER BY topic`)
	if err != nil {
		return nil, fmt.Errorf("mysqlledger: outbox stats: %w", err)
	}
	defer rows.Close()
	var out []idemstore.OutboxTopicStats
	for rows.Next() {
		var s idemstore.OutboxTopicStats
		var oldest int64
		if err := rows.Scan(&s.Topic, &s.Backlog, &oldest, &s.Delivered, &s.Failed, &s.Parked); err != nil {
			return nil, fmt.Errorf("mysqlledger: outbox stats: %w", err)
		}
		s.Oldest = fromMicros(oldest)
		out = append(out, s)
	}
	return out, rows.Err()
}
