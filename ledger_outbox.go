package idem

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem/idemstore"
)

var (
	_ idemstore.OutboxTxStore[*sql.Tx] = ledgerStore{}
	_ idemstore.OutboxStore            = ledgerStore{}
	_ idemstore.OutboxReleaser         = ledgerStore{}
)

// outboxSchema is the outbox's table (version 5): one row per message,
// seq its order (SQLite commits one transaction at a time, so seq order
// is commit order).
const outboxSchema = `
CREATE TABLE IF NOT EXISTS idem_outbox (
	seq         INTEGER PRIMARY KEY,
	id          TEXT    NOT NULL UNIQUE,
	topic       TEXT    NOT NULL,
	payload     BLOB    NOT NULL,
	headers     TEXT    NOT NULL DEFAULT '',
	job         TEXT    NOT NULL,
	period      TEXT    NOT NULL,
	item        TEXT    NOT NULL DEFAULT '',
	status      TEXT    NOT NULL DEFAULT 'pending',
	attempts    INTEGER NOT NULL DEFAULT 0,
	token       INTEGER NOT NULL DEFAULT 0,
	owner       TEXT    NOT NULL DEFAULT '',
	lease_until INTEGER NOT NULL DEFAULT 0,
	not_before  INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT    NOT NULL DEFAULT '',
	created     INTEGER NOT NULL,
	delivered   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idem_outbox_by_topic ON idem_outbox(status, topic, seq);
CREATE INDEX IF NOT EXISTS idem_outbox_by_delivered ON idem_outbox(status, delivered);
`

const outboxCols = `seq, id, topic, payload, headers, job, period, item, status, attempts, token, owner, lease_until, not_before, last_error, created, delivered`

// encodeHeaders is the headers' column: their JSON, "" for none.
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

// PutOutbox implements [idemstore.OutboxTxStore]: it inserts msgs into
// table idem_outbox in tx.
func (l ledgerStore) PutOutbox(ctx context.Context, tx *sql.Tx, msgs []idemstore.OutboxMessage) error {
	const q = `INSERT INTO idem_outbox(id, topic, payload, headers, job, period, item, created) VALUES(?, ?, ?, ?, ?, ?, ?, ?)`
	st, err := l.prep(ctx, l.db, q)
	if err != nil {
		return err
	}
	st = tx.StmtContext(ctx, st)
	for _, m := range msgs {
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, m.ID, m.Topic, m.Payload, h, m.Key.Job, m.Key.Period, m.Item, micros(m.Created)); err != nil {
			if strings.Contains(err.Error(), "UNIQUE") {
				return fmt.Errorf("message id %s is already in the outbox: %w", m.ID, err)
			}
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
	r.LeaseUntil, r.NotBefore, r.Created, r.Delivered = fromMicros(lease), fromMicros(notBefore), fromMicros(created), fromMicros(delivered)
	return r, nil
}

// queryOutbox runs query on q and scans the messages it returns; q may
// be a prepared statement (then query is "").
func queryOutbox(ctx context.Context, q any, query string, args ...any) ([]idemstore.OutboxRecord, error) {
	var rows *sql.Rows
	var err error
	switch q := q.(type) {
	case *sql.Stmt:
		rows, err = q.QueryContext(ctx, args...)
	case execer:
		rows, err = q.QueryContext(ctx, query, args...)
	default:
		panic(fmt.Sprintf("queryOutbox on %T", q))
	}
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

// The outbox claim's statements. Each reads the heads of the topics (and
// what follows them), never the backlog: every read of idem_outbox is by
// rowid or a range of idem_outbox_by_topic within one topic, one entry
// long where it looks for a head. INDEXED BY holds them to that index:
// once ANALYZE has run, the rowid order can look cheaper for "a topic's
// messages from seq on", and walking it reads every other topic's
// messages on the way.
const (
	// outboxHeadsSQL is the first pending message of each topic that is
	// due and not leased (?1: now), oldest first, up to ?2: t walks the
	// index from topic to topic, one search each (a loose index scan),
	// and each topic's head is the first entry of its range.
	outboxHeadsSQL = `WITH RECURSIVE t(topic) AS (
		SELECT (SELECT topic FROM idem_outbox INDEXED BY idem_outbox_by_topic WHERE status = 'pending' ORDER BY topic LIMIT 1)
		UNION ALL
		SELECT (SELECT p.topic FROM idem_outbox p INDEXED BY idem_outbox_by_topic
			WHERE p.status = 'pending' AND p.topic > t.topic ORDER BY p.topic LIMIT 1)
		FROM t WHERE t.topic IS NOT NULL)
	SELECT o.seq, o.topic FROM t JOIN idem_outbox o ON o.seq = (SELECT p.seq FROM idem_outbox p INDEXED BY idem_outbox_by_topic
		WHERE p.status = 'pending' AND p.topic = t.topic ORDER BY p.seq LIMIT 1)
	WHERE o.lease_until <= ?1 AND o.not_before <= ?1
	ORDER BY o.seq LIMIT ?2`

	// outboxDueSQL is 1 if a topic's head is due (?1: now), else 0.
	outboxDueSQL = `SELECT count(*) FROM (` + outboxHeadsSQL + `)`

	// outboxClaimHeadsSQL claims (?3: the owner, ?4: the lease's end)
	// the heads outboxHeadsSQL finds.
	outboxClaimHeadsSQL = `UPDATE idem_outbox SET attempts = attempts + 1, token = token + 1, owner = ?3, lease_until = ?4
	WHERE seq IN (SELECT seq FROM (` + outboxHeadsSQL + `))
	RETURNING ` + outboxCols

	// outboxNextSQL is what follows a head: the pending messages of its
	// topic (?1) after it (?2), up to ?3.
	outboxNextSQL = `SELECT seq, lease_until, not_before FROM idem_outbox INDEXED BY idem_outbox_by_topic
	WHERE status = 'pending' AND topic = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3`
)

// ClaimOutbox implements [idemstore.OutboxStore]: in one write
// transaction it takes the first pending message of each topic that is
// due and not leased, up to req.N of them, oldest first (with req.Run
// above 1, runs: claimOutboxRuns). A read comes first: when nothing is
// due (an idle relay's pass, and the last claim of every pass) it writes
// nothing and does not wait for the write lock. Its cost grows with the
// topics and the messages it takes, not with the backlog (outboxHeadsSQL).
func (l ledgerStore) ClaimOutbox(ctx context.Context, req idemstore.OutboxClaimRequest) ([]idemstore.OutboxRecord, error) {
	var due int
	err := busyRetry(ctx, func() error {
		return l.queryRow(ctx, outboxDueSQL, micros(req.Now), 1).Scan(&due)
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: claim outbox messages: %w", l.where(), err)
	}
	if due == 0 {
		return nil, nil
	}
	var out []idemstore.OutboxRecord
	err = l.withTx(ctx, false, func(tx *wtx) (err error) {
		at := tx.at(req.Now) // the lease counts from when it is written
		if req.Run > 1 {
			out, err = claimOutboxRuns(ctx, tx, req, at)
			return err
		}
		st, err := tx.stmt(outboxClaimHeadsSQL)
		if err != nil {
			return err
		}
		out, err = queryOutbox(ctx, st, "", micros(at), req.N, req.Owner, micros(at.Add(req.Lease)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: claim outbox messages: %w", l.where(), err)
	}
	slices.SortFunc(out, func(a, b idemstore.OutboxRecord) int { return int(a.Seq - b.Seq) })
	return out, nil
}

// claimOutboxRuns is ClaimOutbox with req.Run > 1, in its write
// transaction tx: the due heads of the topics, oldest first, and after
// each head the messages of its topic right after it (up to req.Run in
// all, the batch up to req.N), as long as each is due and not leased;
// then one UPDATE takes them all. Every read is a range of the index on
// (status, topic, seq): O(topics + messages taken), whatever the backlog.
func claimOutboxRuns(ctx context.Context, tx *wtx, req idemstore.OutboxClaimRequest, at time.Time) ([]idemstore.OutboxRecord, error) {
	now := micros(at)
	heads, err := tx.stmt(outboxHeadsSQL)
	if err != nil {
		return nil, err
	}
	next, err := tx.stmt(outboxNextSQL)
	if err != nil {
		return nil, err
	}
	type head struct {
		seq   int64
		topic string
	}
	var hs []head
	rows, err := heads.QueryContext(ctx, now, req.N)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.seq, &h.topic); err != nil {
			rows.Close()
			return nil, err
		}
		hs = append(hs, h)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	seqs := make([]int64, 0, req.N)
	for i, h := range hs {
		// Every head left gets its place: the runs fill what they leave.
		room := req.N - len(seqs) - (len(hs) - i - 1)
		seqs = append(seqs, h.seq)
		if more := min(req.Run, room) - 1; more > 0 {
			rows, err := next.QueryContext(ctx, h.topic, h.seq, more)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var seq, lease, notBefore int64
				if err := rows.Scan(&seq, &lease, &notBefore); err != nil {
					rows.Close()
					return nil, err
				}
				if lease > now || notBefore > now {
					break // the run ends at the first message that is not due
				}
				seqs = append(seqs, seq)
			}
			if err := rows.Close(); err != nil {
				return nil, err
			}
		}
	}
	if len(seqs) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(seqs)
	if err != nil {
		return nil, err
	}
	take, err := tx.stmt(`UPDATE idem_outbox SET attempts = attempts + 1, token = token + 1, owner = ?, lease_until = ?
		WHERE seq IN (SELECT value FROM json_each(?)) RETURNING ` + outboxCols)
	if err != nil {
		return nil, err
	}
	return queryOutbox(ctx, take, "", req.Owner, micros(at.Add(req.Lease)), string(list))
}

// ReleaseOutbox implements [idemstore.OutboxReleaser]: in one write
// transaction, each claim still the message's latest gets its lease
// released and its attempt count back.
func (l ledgerStore) ReleaseOutbox(ctx context.Context, claims []idemstore.OutboxClaimed) error {
	if len(claims) == 0 {
		return nil
	}
	err := l.withTx(ctx, false, func(tx *wtx) error {
		for _, c := range claims {
			if _, err := tx.exec(`UPDATE idem_outbox SET attempts = attempts - 1, lease_until = 0
				WHERE id = ? AND token = ? AND status = 'pending'`, c.ID, c.Token); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idem: %s: release outbox claims: %w", l.where(), err)
	}
	return nil
}

// outboxEnd runs a fenced end of the claim token of message id.
func (l *Ledger) outboxEnd(ctx context.Context, what, id string, token int64, q string, args ...any) error {
	err := l.withTx(ctx, false, func(tx *wtx) error {
		res, err := tx.exec(q, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: outbox message %s: its claim %d is no longer the latest (its lease ran out and another relay took it, or it was dropped or settled); %s refused",
				ErrLeaseLost, id, token, what)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("idem: %s: outbox message %s: %s: %w", l.where(), id, what, err)
	}
	return err
}

// DeliveredOutbox implements [idemstore.OutboxStore].
func (l ledgerStore) DeliveredOutbox(ctx context.Context, id string, token int64, now time.Time) error {
	return l.outboxEnd(ctx, "delivered mark", id, token,
		`UPDATE idem_outbox SET status = 'delivered', delivered = ?, lease_until = 0, last_error = '' WHERE id = ? AND token = ? AND status = 'pending'`,
		micros(now), id, token)
}

// FailOutbox implements [idemstore.OutboxStore].
func (l ledgerStore) FailOutbox(ctx context.Context, id string, token int64, f idemstore.OutboxFailure) error {
	status := idemstore.OutboxPending
	if f.Park {
		status = idemstore.OutboxParked
	}
	return l.outboxEnd(ctx, "failure record", id, token,
		`UPDATE idem_outbox SET status = ?, not_before = ?, lease_until = 0, last_error = ? WHERE id = ? AND token = ? AND status = 'pending'`,
		string(status), micros(f.NotBefore), f.Error, id, token)
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
	q := `SELECT ` + outboxCols + ` FROM idem_outbox`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	var out []idemstore.OutboxRecord
	err := busyRetry(ctx, func() (err error) {
		out, err = queryOutbox(ctx, l.db, q, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: list outbox: %w", l.where(), err)
	}
	return out, nil
}

// RetryOutbox implements [idemstore.OutboxStore].
func (l *Ledger) RetryOutbox(ctx context.Context, id string, now time.Time) error {
	return l.outboxOp(ctx, "retry", id, `UPDATE idem_outbox SET status = 'pending', attempts = 0, not_before = ?, lease_until = 0 WHERE id = ? AND status = 'parked'`,
		micros(now), id)
}

// DropOutbox implements [idemstore.OutboxStore].
func (l *Ledger) DropOutbox(ctx context.Context, id string) error {
	return l.outboxOp(ctx, "drop", id, `DELETE FROM idem_outbox WHERE id = ?`, id)
}

func (l *Ledger) outboxOp(ctx context.Context, op, id, q string, args ...any) error {
	var n int64
	err := l.withTx(ctx, true, func(tx *wtx) error {
		res, err := tx.exec(q, args...)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("idem: %s: %s outbox message %s: %w", l.where(), op, id, err)
	case n == 0:
		what := "no message"
		if op == "retry" {
			what = "no parked message"
		}
		return fmt.Errorf("%w: %s: %s has %s with id %s; nothing was written", idemstore.ErrMessageNotFound, op, l.where(), what, id)
	}
	return nil
}

// PruneOutbox implements [idemstore.OutboxStore].
func (l *Ledger) PruneOutbox(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := l.withTx(ctx, false, func(tx *wtx) error {
		res, err := tx.exec(`DELETE FROM idem_outbox WHERE status = 'delivered' AND delivered < ?`, micros(before))
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("idem: %s: prune outbox: %w", l.where(), err)
	}
	return n, nil
}

// OutboxStats implements [idemstore.OutboxStore].
func (l *Ledger) OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error) {
	var out []idemstore.OutboxTopicStats
	err := busyRetry(ctx, func() error {
		out = nil
		rows, err := l.db.QueryContext(ctx, `SELECT topic,
				sum(status = 'pending'),
				coalesce(min(CASE WHEN status = 'pending' THEN created END), 0),
				sum(status = 'delivered'),
				sum(status = 'pending' AND last_error != ''),
				sum(status = 'parked')
			FROM idem_outbox GROUP BY topic ORDER BY topic`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s idemstore.OutboxTopicStats
			var oldest int64
			if err := rows.Scan(&s.Topic, &s.Backlog, &oldest, &s.Delivered, &s.Failed, &s.Parked); err != nil {
				return err
			}
			s.Oldest = fromMicros(oldest)
			out = append(out, s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: outbox stats: %w", l.where(), err)
	}
	return out, nil
}
