package pgledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/outbox"
	"github.com/jackc/pgx/v5"
)

var (
	_ idemstore.OutboxTxStore[pgx.Tx]  = (*Ledger)(nil)
	_ idemstore.OutboxTxStore[*sql.Tx] = (*DBLedger)(nil)
	_ idemstore.OutboxReleaser         = (*Ledger)(nil)
	_ idemstore.OutboxReleaser         = (*DBLedger)(nil)
)

// The outbox (version 5): one row per message in table outbox, seq its
// order. A transaction that puts a message takes a transaction-scoped
// advisory lock on its topic first, so that within a topic seq order is
// commit order: transactions that put messages of one topic commit one
// after the other (from their first Put of it to their commit). Times are
// in microseconds since the Unix epoch, 0 for none. Leases (lease_until)
// and backoff deadlines (not_before) are on the server's clock
// (clock_timestamp()), as the runs' are: relays on hosts whose clocks
// disagree still agree on when a claim has expired and a retry is due; a
// relay's clock counts only as durations (the lease, a backoff's
// NotBefore - Now). created and delivered are the run's and the relay's
// clocks: they are shown, and compared only by Prune and OutboxStats'
// Oldest.
const (
	outboxDDL = `
CREATE TABLE IF NOT EXISTS {s}.outbox (
	seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id          text COLLATE "C" NOT NULL UNIQUE,
	topic       text COLLATE "C" NOT NULL,
	payload     bytea NOT NULL,
	headers     text NOT NULL DEFAULT '',
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	item        text COLLATE "C" NOT NULL DEFAULT '',
	status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'parked')),
	attempts    integer NOT NULL DEFAULT 0,
	token       bigint NOT NULL DEFAULT 0,
	owner       text NOT NULL DEFAULT '',
	lease_until bigint NOT NULL DEFAULT 0,
	not_before  bigint NOT NULL DEFAULT 0,
	last_error  text NOT NULL DEFAULT '',
	created     bigint NOT NULL,
	delivered   bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_pending ON {s}.outbox (topic, seq) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS outbox_delivered ON {s}.outbox (delivered) WHERE status = 'delivered';`

	outboxCols = `seq, id, topic, payload, headers, job, period, item, status, attempts, token, owner, lease_until, not_before, last_error, created, delivered`

	// outboxPutSQL locks the topic ($1: its advisory lock id) for the rest
	// of the transaction, then inserts: the row's seq is drawn under the
	// lock.
	outboxPutSQL = `WITH l AS (SELECT pg_advisory_xact_lock($1))
	INSERT INTO {s}.outbox(id, topic, payload, headers, job, period, item, created)
	SELECT $2::text, $3::text, $4::bytea, $5::text, $6::text, $7::text, $8::text, $9::bigint FROM l`

	// srvNow is the server's clock in the outbox's unit.
	srvNow = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

	// outboxClaimSQL claims ($1: the owner, $2: the lease in microseconds)
	// the first pending message of each topic that is due and not leased
	// (clk: the server's now, read once), oldest first, up to $4, and
	// after each such head the pending
	// messages of its topic right after it, each due and not leased, up to
	// the first that is not: up to $4 of the topic in all (1: the head
	// alone) and $3 in all, the heads first. It reads the heads and what
	// follows them, never the backlog: heads walks outbox_pending from
	// topic to topic, one descent each (a loose index scan: the first
	// entry after a topic's last is the next topic's head); taken locks
	// the due heads, oldest first, passing over those another claim holds
	// (SKIP LOCKED: relays on many hosts share the work); next reads the
	// entries after each taken head, up to the room left, and held locks
	// the due ones of its topic, passing over any another transaction
	// holds; a run ends at the first message that is not due or not held,
	// so that it skips none. taken, held and the UPDATE fetch their rows
	// by ctid (TID scans, whatever the statistics say). A row that a
	// concurrent transaction changed since the statement began is left
	// out (its new version's ctid is not the one asked for): a claim may
	// take fewer messages than it could, never one it should not, and
	// every row it updates is one it locked, as its snapshot shows it.
	outboxClaimSQL = `WITH RECURSIVE clk(now) AS MATERIALIZED (SELECT ` + srvNow + `
	), heads(topic, seq, ctid) AS (
		(SELECT o.topic, o.seq, o.ctid FROM {s}.outbox o WHERE o.status = 'pending' ORDER BY o.topic, o.seq LIMIT 1)
		UNION ALL
		SELECT n.topic, n.seq, n.ctid FROM heads h CROSS JOIN LATERAL (
			SELECT o.topic, o.seq, o.ctid FROM {s}.outbox o WHERE o.status = 'pending' AND o.topic > h.topic
			ORDER BY o.topic, o.seq LIMIT 1) n
	), taken AS (
		SELECT c.seq, c.topic, c.ctid FROM {s}.outbox c
		WHERE c.ctid = ANY (ARRAY(SELECT ctid FROM heads))
		  AND c.status = 'pending' AND c.lease_until <= (SELECT now FROM clk) AND c.not_before <= (SELECT now FROM clk)
		ORDER BY c.seq LIMIT $3::bigint
		FOR UPDATE OF c SKIP LOCKED
	), next AS (
		SELECT h.seq AS head, f.seq, f.ctid, f.topic = h.topic AND f.lease_until <= (SELECT now FROM clk) AND f.not_before <= (SELECT now FROM clk) AS due
		FROM taken h CROSS JOIN LATERAL (
			SELECT o.seq, o.topic, o.ctid, o.lease_until, o.not_before FROM {s}.outbox o
			WHERE o.status = 'pending' AND (o.topic, o.seq) > (h.topic, h.seq)
			ORDER BY o.topic, o.seq LIMIT least($4::bigint, $3::bigint - (SELECT count(*) FROM taken) + 1) - 1) f
	), held AS (
		SELECT c.seq, c.ctid FROM {s}.outbox c
		WHERE c.ctid = ANY (ARRAY(SELECT ctid FROM next WHERE due))
		  AND c.status = 'pending' AND c.lease_until <= (SELECT now FROM clk) AND c.not_before <= (SELECT now FROM clk)
		FOR UPDATE OF c SKIP LOCKED
	), runs AS (
		SELECT r.ctid, row_number() OVER (ORDER BY r.head, r.seq) AS k FROM (
			SELECT n.head, n.seq, l.ctid, bool_and(n.due AND l.seq IS NOT NULL) OVER (PARTITION BY n.head ORDER BY n.seq) AS ok
			FROM next n LEFT JOIN held l ON l.seq = n.seq) r
		WHERE r.ok
	)
	UPDATE {s}.outbox o SET attempts = o.attempts + 1, token = o.token + 1, owner = $1::text, lease_until = (SELECT now FROM clk) + $2::bigint
	WHERE o.ctid = ANY (ARRAY(SELECT ctid FROM taken UNION ALL SELECT ctid FROM runs WHERE k <= $3::bigint - (SELECT count(*) FROM taken)))
	RETURNING ` + outboxCols

	// outboxReleaseSQL gives back each claim ($1: ids, $2: their tokens)
	// that is still its message's latest.
	outboxReleaseSQL = `UPDATE {s}.outbox o SET attempts = o.attempts - 1, lease_until = 0
	FROM unnest($1::text[], $2::bigint[]) AS c(id, token)
	WHERE o.id = c.id AND o.token = c.token AND o.status = 'pending'`

	outboxDeliveredSQL = `UPDATE {s}.outbox SET status = 'delivered', delivered = $1, lease_until = 0, last_error = ''
	WHERE id = $2 AND token = $3 AND status = 'pending'`
	// outboxFailSQL's $2 is the backoff in microseconds from the server's
	// now, negative for none.
	outboxFailSQL = `UPDATE {s}.outbox SET status = $1,
		not_before = CASE WHEN $2::bigint < 0 THEN 0 ELSE ` + srvNow + ` + $2::bigint END, lease_until = 0, last_error = $3
	WHERE id = $4 AND token = $5 AND status = 'pending'`
	outboxRetrySQL = `UPDATE {s}.outbox SET status = 'pending', attempts = 0, not_before = 0, lease_until = 0
	WHERE id = $1 AND status = 'parked'`
	outboxDropSQL  = `DELETE FROM {s}.outbox WHERE id = $1`
	outboxPruneSQL = `DELETE FROM {s}.outbox WHERE status = 'delivered' AND delivered < $1`
	outboxStatsSQL = `SELECT topic,
		count(*) FILTER (WHERE status = 'pending'),
		coalesce(min(created) FILTER (WHERE status = 'pending'), 0),
		count(*) FILTER (WHERE status = 'delivered'),
		count(*) FILTER (WHERE status = 'pending' AND last_error <> ''),
		count(*) FILTER (WHERE status = 'parked')
	FROM {s}.outbox GROUP BY topic ORDER BY topic`
)

func (l *core) oq(q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{l.schema}.Sanitize())
}

func usMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromUs(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// PutOutbox implements [idemstore.OutboxTxStore] with pgx.Tx: it inserts
// msgs into the schema's table outbox in tx (outbox.Put).
//
// Each message first takes a transaction-scoped advisory lock on its
// topic, held until tx ends: transactions that put messages of one topic
// commit one after the other, which is what keeps a topic's order equal
// to its commit order. Two transactions that put messages of the same two
// topics in opposite orders can deadlock; PostgreSQL then aborts one of
// them, and its run counts a failed attempt that is retried. Put a
// transaction's topics in a fixed order (sorted, say) to avoid it.
func (l *Ledger) PutOutbox(ctx context.Context, t pgx.Tx, msgs []idemstore.OutboxMessage) error {
	return l.putOutbox(ctx, pgxTx{t}, msgs)
}

// PutOutbox implements [idemstore.OutboxTxStore] with *sql.Tx, as
// [Ledger.PutOutbox] does with pgx.Tx.
func (l *DBLedger) PutOutbox(ctx context.Context, t *sql.Tx, msgs []idemstore.OutboxMessage) error {
	return l.putOutbox(ctx, sqlTx{t}, msgs)
}

func (l *core) putOutbox(ctx context.Context, t conn, msgs []idemstore.OutboxMessage) error {
	q := l.oq(outboxPutSQL)
	for _, m := range msgs {
		h := ""
		if len(m.Headers) > 0 {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return err
			}
			h = string(b)
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		if _, err := t.exec(ctx, q, l.lockID("outbox", m.Topic), m.ID, m.Topic, payload, h, m.Key.Job, m.Key.Period, m.Item, usMicros(m.Created)); err != nil {
			if strings.Contains(err.Error(), "23505") || strings.Contains(err.Error(), "duplicate key") {
				return fmt.Errorf("message id %s is already in the outbox: %w", m.ID, err)
			}
			return err
		}
	}
	return nil
}

func scanOutbox(scan func(dest ...any) error) (idemstore.OutboxRecord, error) {
	var r idemstore.OutboxRecord
	var headers, status string
	var attempts int32
	var lease, notBefore, created, delivered int64
	err := scan(&r.Seq, &r.ID, &r.Topic, &r.Payload, &headers, &r.Key.Job, &r.Key.Period, &r.Item, &status,
		&attempts, &r.Token, &r.Owner, &lease, &notBefore, &r.LastError, &created, &delivered)
	if err != nil {
		return r, err
	}
	if headers != "" {
		if err := json.Unmarshal([]byte(headers), &r.Headers); err != nil {
			return r, fmt.Errorf("outbox message %s: headers %q: %w", r.ID, headers, err)
		}
	}
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	r.Attempts = int(attempts)
	r.Status = idemstore.OutboxStatus(status)
	r.LeaseUntil, r.NotBefore, r.Created, r.Delivered = fromUs(lease), fromUs(notBefore), fromUs(created), fromUs(delivered)
	return r, nil
}

func (l *core) queryOutbox(ctx context.Context, c conn, q string, args ...any) ([]idemstore.OutboxRecord, error) {
	var out []idemstore.OutboxRecord
	err := c.query(ctx, q, args, func(scan func(dest ...any) error) error {
		r, err := scanOutbox(scan)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// ClaimOutbox implements [idemstore.OutboxStore]: one statement takes the
// first pending message of each topic that is due and not leased, and with
// req.Run above 1 the ones right after it (a run of the topic, as
// [idemstore.OutboxClaimRequest] says), with FOR UPDATE SKIP LOCKED, so
// that relays on many hosts share the work and never hold one message at
// once. It reads the index of pending messages a topic at a time, not the
// backlog: its cost grows with the topics and the messages it takes, not
// with the messages pending.
//
// The lease runs on the server's clock, from the claim's statement, for
// req.Lease; each record's LeaseUntil is expressed on the caller's clock
// (req.Now + req.Lease, no later than the server's lease ends, as req.Now
// was read before the claim), for a relay that ends its deliverer's
// context there.
func (l *core) ClaimOutbox(ctx context.Context, req idemstore.OutboxClaimRequest) ([]idemstore.OutboxRecord, error) {
	out, err := l.queryOutbox(ctx, l.db, l.oq(outboxClaimSQL), claimArgs(req)...)
	if err != nil {
		return nil, fmt.Errorf("pgledger: schema %q: claim outbox messages: %w", l.schema, err)
	}
	for i := range out {
		out[i].LeaseUntil = req.Now.Add(req.Lease)
	}
	sortSeq(out)
	return out, nil
}

// claimArgs are outboxClaimSQL's arguments for req.
func claimArgs(req idemstore.OutboxClaimRequest) []any {
	return []any{req.Owner, req.Lease.Microseconds(), int64(req.N), int64(max(req.Run, 1))}
}

// ReleaseOutbox implements [idemstore.OutboxReleaser]: in one statement,
// each claim still the message's latest gets its lease released and its
// attempt count back.
func (l *core) ReleaseOutbox(ctx context.Context, claims []idemstore.OutboxClaimed) error {
	if len(claims) == 0 {
		return nil
	}
	ids, tokens := make([]string, len(claims)), make([]int64, len(claims))
	for i, c := range claims {
		ids[i], tokens[i] = c.ID, c.Token
	}
	if _, err := l.db.exec(ctx, l.oq(outboxReleaseSQL), ids, tokens); err != nil {
		return fmt.Errorf("pgledger: schema %q: release outbox claims: %w", l.schema, err)
	}
	return nil
}

func sortSeq(out []idemstore.OutboxRecord) {
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Seq < out[j-1].Seq; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
}

func (l *core) outboxEnd(ctx context.Context, what, id string, token int64, q string, args ...any) error {
	n, err := l.db.exec(ctx, l.oq(q), args...)
	if err != nil {
		return fmt.Errorf("pgledger: schema %q: outbox message %s: %s: %w", l.schema, id, what, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: outbox message %s: its claim %d is no longer the latest (its lease ran out and another relay took it, or it was dropped or settled); %s refused",
			idem.ErrLeaseLost, id, token, what)
	}
	return nil
}

// DeliveredOutbox implements [idemstore.OutboxStore].
func (l *core) DeliveredOutbox(ctx context.Context, id string, token int64, now time.Time) error {
	return l.outboxEnd(ctx, "delivered mark", id, token, outboxDeliveredSQL, usMicros(now), id, token)
}

// FailOutbox implements [idemstore.OutboxStore].
func (l *core) FailOutbox(ctx context.Context, id string, token int64, f idemstore.OutboxFailure) error {
	status := idemstore.OutboxPending
	if f.Park {
		status = idemstore.OutboxParked
	}
	backoff := int64(-1) // none: parked, or due at once
	if !f.NotBefore.IsZero() {
		backoff = max(f.NotBefore.Sub(f.Now).Microseconds(), 0)
	}
	return l.outboxEnd(ctx, "failure record", id, token, outboxFailSQL, string(status), backoff, f.Error, id, token)
}

// ListOutbox implements [idemstore.OutboxStore].
func (l *core) ListOutbox(ctx context.Context, f idemstore.OutboxFilter) ([]idemstore.OutboxRecord, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"topic", f.Topic}, {"status", string(f.Status)}, {"id", f.ID}} {
		if c.v != "" {
			args = append(args, c.v)
			where = append(where, fmt.Sprintf("%s = $%d", c.col, len(args)))
		}
	}
	q := `SELECT ` + outboxCols + ` FROM {s}.outbox`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	out, err := l.queryOutbox(ctx, l.db, l.oq(q), args...)
	if err != nil {
		return nil, fmt.Errorf("pgledger: schema %q: list outbox: %w", l.schema, err)
	}
	return out, nil
}

// RetryOutbox implements [idemstore.OutboxStore]: the message is due at
// once, on the server's clock (the caller's is not needed).
func (l *core) RetryOutbox(ctx context.Context, id string, _ time.Time) error {
	return l.outboxOp(ctx, "retry", id, outboxRetrySQL, id)
}

// DropOutbox implements [idemstore.OutboxStore].
func (l *core) DropOutbox(ctx context.Context, id string) error {
	return l.outboxOp(ctx, "drop", id, outboxDropSQL, id)
}

func (l *core) outboxOp(ctx context.Context, op, id, q string, args ...any) error {
	n, err := l.db.exec(ctx, l.oq(q), args...)
	switch {
	case err != nil:
		return fmt.Errorf("pgledger: schema %q: %s outbox message %s: %w", l.schema, op, id, err)
	case n == 0:
		what := "no message"
		if op == "retry" {
			what = "no parked message"
		}
		return fmt.Errorf("%w: %s: schema %q has %s with id %s; nothing was written", outbox.ErrMessageNotFound, op, l.schema, what, id)
	}
	return nil
}

// PruneOutbox implements [idemstore.OutboxStore].
func (l *core) PruneOutbox(ctx context.Context, before time.Time) (int64, error) {
	n, err := l.db.exec(ctx, l.oq(outboxPruneSQL), usMicros(before))
	if err != nil {
		return 0, fmt.Errorf("pgledger: schema %q: prune outbox: %w", l.schema, err)
	}
	return n, nil
}

// OutboxStats implements [idemstore.OutboxStore].
func (l *core) OutboxStats(ctx context.Context) ([]idemstore.OutboxTopicStats, error) {
	var out []idemstore.OutboxTopicStats
	err := l.db.query(ctx, l.oq(outboxStatsSQL), nil, func(scan func(dest ...any) error) error {
		var s idemstore.OutboxTopicStats
		var oldest int64
		if err := scan(&s.Topic, &s.Backlog, &oldest, &s.Delivered, &s.Failed, &s.Parked); err != nil {
			return err
		}
		s.Oldest = fromUs(oldest)
		out = append(out, s)
		return nil
	})
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pgledger: schema %q: outbox stats: %w", l.schema, err)
	}
	return out, nil
}

var (
	_ idemstore.OutboxReleaser = (*Ledger)(nil)
	_ idemstore.OutboxReleaser = (*DBLedger)(nil)
)
