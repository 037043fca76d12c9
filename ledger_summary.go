package idem

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

// Summarize implements [idemstore.Summarizer]: the counts are a row per
// job and status of idem_job_counts (schema version 8, kept by triggers),
// read in one statement; then, per job, its latest period is a seek of the
// primary key, and its latest done period a walk of it from the job's
// end down to the first done record.
func (l *Ledger) Summarize(ctx context.Context, job string) ([]idemstore.JobSummary, error) {
	if job != "" {
		if err := idemstore.ValidateJob(job); err != nil {
			return nil, err
		}
	}
	var out []idemstore.JobSummary
	err := busyRetry(ctx, func() error {
		out = out[:0]
		rows, err := l.db.QueryContext(ctx, `SELECT job, status, n, updated FROM idem_job_counts WHERE (?1 = '' OR job = ?1) ORDER BY job, status`, job)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var j, status string
			var n, updated int64
			if err := rows.Scan(&j, &status, &n, &updated); err != nil {
				return err
			}
			if len(out) == 0 || out[len(out)-1].Job != j {
				out = append(out, idemstore.JobSummary{Job: j, Counts: map[Status]int64{}})
			}
			s := &out[len(out)-1]
			if n > 0 {
				s.Counts[Status(status)] = n
			}
			if t := fromMicros(updated); t.After(s.LastChange) {
				s.LastChange = t
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		kept := out[:0]
		for _, s := range out {
			if s.Total() == 0 {
				continue // every record pruned
			}
			var latest, lastDone sql.NullString
			var doneAt sql.NullInt64
			if err := l.queryRow(ctx, `SELECT (SELECT max(period) FROM idem_runs WHERE job = ?1), d.period, d.updated
				FROM (SELECT 1) LEFT JOIN (SELECT period, updated FROM idem_runs WHERE job = ?1 AND status = 'done' ORDER BY period DESC LIMIT 1) AS d`,
				s.Job).Scan(&latest, &lastDone, &doneAt); err != nil {
				return err
			}
			s.Latest, s.LastDone, s.LastDoneAt = latest.String, lastDone.String, fromMicros(doneAt.Int64)
			kept = append(kept, s)
		}
		out = kept
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: summarize: %w", l.where(), err)
	}
	return out, nil
}

// attentionIn is the WHERE of the index idem_runs_attention, as a query
// must spell it for SQLite to use the index (INDEXED BY fails otherwise).
// It matches the first spelling too (attentionWhereV8), should a ledger's
// index still have it: SQLite turns ORs of equalities on one column into
// that IN, which the index's WHERE then matches (TestAttentionIndexRespelled).
const attentionIn = `(` + attentionWhere + `)`

// ListPage implements [idemstore.Pager]: a range of the job's primary key,
// from its latest period down; with statuses that need a look (unknown,
// parked, failed), of the index idem_runs_attention. The records carry no
// Value.
func (l *Ledger) ListPage(ctx context.Context, q idemstore.PageQuery) ([]Record, error) {
	if err := idemstore.ValidateJob(q.Job); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("idem: ListPage of %q: Limit %d, want more than 0", q.Job, q.Limit)
	}
	var b strings.Builder
	attention := len(q.Statuses) > 0
	for _, s := range q.Statuses {
		attention = attention && (s == StatusUnknown || s == StatusParked || s == StatusFailed)
	}
	b.WriteString(`SELECT period, status, attempt, failures, owner, lease_until, not_before, last_error, updated, fingerprint, revision FROM idem_runs`)
	if attention {
		// Without the statistics of ANALYZE, SQLite would rather walk
		// the primary key, in order, than look each row up from the
		// index.
		b.WriteString(` INDEXED BY idem_runs_attention`)
	}
	b.WriteString(` WHERE job = ?`)
	args := []any{q.Job}
	if q.Before != "" {
		b.WriteString(` AND period < ?`)
		args = append(args, q.Before)
	}
	if q.From != "" {
		b.WriteString(` AND period >= ?`)
		args = append(args, q.From)
	}
	if len(q.Statuses) > 0 {
		b.WriteString(` AND status IN (?` + strings.Repeat(`, ?`, len(q.Statuses)-1) + `)`)
		for _, s := range q.Statuses {
			args = append(args, string(s))
		}
		if attention {
			b.WriteString(` AND ` + attentionIn)
		}
	}
	b.WriteString(` ORDER BY period DESC LIMIT ?`)
	args = append(args, q.Limit)
	var recs []Record
	err := busyRetry(ctx, func() error {
		recs = recs[:0]
		rows, err := l.db.QueryContext(ctx, b.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r := Record{Key: Key{Job: q.Job}}
			var status string
			var lease, notBefore, updated int64
			if err := rows.Scan(&r.Key.Period, &status, &r.Attempt, &r.Failures, &r.Owner,
				&lease, &notBefore, &r.LastError, &updated, &r.Fingerprint, &r.Revision); err != nil {
				return err
			}
			r.Status, r.LeaseUntil, r.NotBefore, r.Updated = Status(status), fromMicros(lease), fromMicros(notBefore), fromMicros(updated)
			recs = append(recs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("idem: %s: list a page of %s: %w", l.where(), q.Job, err)
	}
	return recs, nil
}
