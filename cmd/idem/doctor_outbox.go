package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultOutboxMaxAge is doctor's --outbox-max-age: a relay polls every
// second, so a message pending for an hour means no relay runs, or the
// receiver has been failing that long.
const DefaultOutboxMaxAge = time.Hour

// outboxBacklog is what doctor reads of an outbox: its pending messages,
// when the oldest of them was queued (zero: none), and its parked ones.
type outboxBacklog struct {
	pending, parked int64
	oldest          time.Time
	topics          []topicBacklog // the topics with pending messages, oldest first (at most maxTopicLines)
}

// topicBacklog is one topic's pending messages and its oldest's queue time.
type topicBacklog struct {
	topic   string
	pending int64
	oldest  time.Time
}

// maxTopicLines is how many topics doctor names, those waiting longest.
const maxTopicLines = 10

// sqliteOutboxBacklog reads the outbox of the SQLite ledger db; ok is
// false when the ledger has no outbox table (a schema older than it).
func sqliteOutboxBacklog(ctx context.Context, db *sql.DB) (b outboxBacklog, ok bool, err error) {
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='idem_outbox'`).Scan(&tables); err != nil || tables == 0 {
		return b, false, err
	}
	var oldest int64
	err = db.QueryRowContext(ctx, `SELECT coalesce(sum(status = 'pending'), 0), coalesce(min(CASE WHEN status = 'pending' THEN created END), 0),
		coalesce(sum(status = 'parked'), 0) FROM idem_outbox`).Scan(&b.pending, &oldest, &b.parked)
	if oldest != 0 {
		b.oldest = time.UnixMicro(oldest)
	}
	if err != nil || b.pending == 0 {
		return b, true, err
	}
	rows, err := db.QueryContext(ctx, `SELECT topic, count(*), min(created) FROM idem_outbox WHERE status = 'pending'
		GROUP BY topic ORDER BY min(created), topic LIMIT ?`, maxTopicLines)
	if err != nil {
		return b, true, err
	}
	defer rows.Close()
	for rows.Next() {
		var tb topicBacklog
		var created int64
		if err := rows.Scan(&tb.topic, &tb.pending, &created); err != nil {
			return b, true, err
		}
		tb.oldest = time.UnixMicro(created)
		b.topics = append(b.topics, tb)
	}
	return b, true, rows.Err()
}

// postgresOutboxBacklog reads the outbox of the Postgres ledger in schema
// (quoted: the sanitized identifier); ok is false when it has none.
func postgresOutboxBacklog(ctx context.Context, pool *pgxpool.Pool, schema, quoted string) (b outboxBacklog, ok bool, err error) {
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
		JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'outbox')`, schema).Scan(&ok); err != nil || !ok {
		return b, false, err
	}
	var oldest int64
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'pending'), coalesce(min(created) FILTER (WHERE status = 'pending'), 0),
		count(*) FILTER (WHERE status = 'parked') FROM `+quoted+`.outbox`).Scan(&b.pending, &oldest, &b.parked)
	if oldest != 0 {
		b.oldest = time.UnixMicro(oldest)
	}
	if err != nil || b.pending == 0 {
		return b, true, err
	}
	rows, err := pool.Query(ctx, `SELECT topic, count(*), min(created) FROM `+quoted+`.outbox WHERE status = 'pending'
		GROUP BY topic ORDER BY min(created), topic LIMIT $1`, maxTopicLines)
	if err != nil {
		return b, true, err
	}
	defer rows.Close()
	for rows.Next() {
		var tb topicBacklog
		var created int64
		if err := rows.Scan(&tb.topic, &tb.pending, &created); err != nil {
			return b, true, err
		}
		tb.oldest = time.UnixMicro(created)
		b.topics = append(b.topics, tb)
	}
	return b, true, rows.Err()
}

// checkOutbox adds the findings of an outbox's backlog b as of now: a
// warning when its oldest pending message has waited more than maxAge,
// and one for parked messages; hint is the store flags to repeat in the
// commands it suggests.
func (rep *doctorReport) checkOutbox(b outboxBacklog, now time.Time, maxAge time.Duration, hint string) {
	age := time.Duration(0)
	if !b.oldest.IsZero() && now.After(b.oldest) {
		age = now.Sub(b.oldest)
	}
	switch {
	case b.pending == 0:
		rep.add(levelOK, "outbox", "0 pending")
	case age > maxAge:
		rep.add(levelWarn, "outbox", "%d pending, the oldest queued %s ago (more than --outbox-max-age %s): a backlog. Is a relay running ('idem outbox relay --webhook URL', or a Scheduler's AddRelay), and is its receiver answering (its log, 'idem outbox ls%s --status pending' for the last errors)?",
			b.pending, roundAge(age), maxAge, hint)
	default:
		rep.add(levelOK, "outbox", "%d pending, the oldest queued %s ago", b.pending, roundAge(age))
	}
	for _, tb := range b.topics {
		tage := time.Duration(0)
		if now.After(tb.oldest) {
			tage = now.Sub(tb.oldest)
		}
		level := levelOK
		if tage > maxAge {
			level = levelWarn
		}
		rep.add(level, "outbox", "topic %q: %d pending, the oldest queued %s ago", tb.topic, tb.pending, roundAge(tage))
	}
	if len(b.topics) == maxTopicLines {
		rep.add(levelOK, "outbox", "(the %d topics waiting longest; 'idem outbox ls%s --status pending' lists every message)", maxTopicLines, hint)
	}
	if b.parked > 0 {
		rep.add(levelWarn, "outbox", "%d parked: their delivery failed for good and no relay sends them. List them with 'idem outbox ls%s --status parked' (see the last error), fix the cause, then 'idem outbox retry%s ID' (or drop them)", b.parked, hint, hint)
	}
}

// roundAge rounds an age for a person: to the second, the minute past an
// hour, and in days and hours past two days.
func roundAge(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}
