package pgledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem/idemstore"
)

// Summarize implements [idemstore.Summarizer]: the counts are one GROUP
// BY of the records on the server (its cost grows with the records kept,
// not this process's memory: a row per job and status comes back); then,
// per job, its latest period is a seek of the primary key and its latest
// done period a walk of it from the job's end down to the first done
// record. What is NOT promised: that the counts are as cheap as the SQLite
// ledger's, which keeps them by triggers.
func (l *core) Summarize(ctx context.Context, job string) ([]idemstore.JobSummary, error) {
	if job != "" {
		if err := idemstore.ValidateJob(job); err != nil {
			return nil, err
		}
	}
	runs := pgx.Identifier{l.schema, "runs"}.Sanitize()
	var out []idemstore.JobSummary
	err := l.db.query(ctx, `SELECT job, status, count(*), max(updated) FROM `+runs+` WHERE ($1 = '' OR job = $1) GROUP BY job, status ORDER BY job, status`,
		[]any{job}, func(scan func(...any) error) error {
			var j, status string
			var n int64
			var updated *time.Time
			if err := scan(&j, &status, &n, &updated); err != nil {
				return err
			}
			if len(out) == 0 || out[len(out)-1].Job != j {
				out = append(out, idemstore.JobSummary{Job: j, Counts: map[idemstore.Status]int64{}})
			}
			s := &out[len(out)-1]
			s.Counts[idemstore.Status(status)] = n
			if t := deref(updated); t.After(s.LastChange) {
				s.LastChange = t
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("pgledger: summarize: %w", err)
	}
	for i := range out {
		s := &out[i]
		err := l.db.query(ctx, `SELECT (SELECT max(period) FROM `+runs+` WHERE job = $1), d.period, d.updated
			FROM (SELECT 1) AS one LEFT JOIN (SELECT period, updated FROM `+runs+` WHERE job = $1 AND status = 'done' ORDER BY period DESC LIMIT 1) AS d ON true`,
			[]any{s.Job}, func(scan func(...any) error) error {
				var latest, lastDone *string
				var doneAt *time.Time
				if err := scan(&latest, &lastDone, &doneAt); err != nil {
					return err
				}
				if latest != nil {
					s.Latest = *latest
				}
				if lastDone != nil {
					s.LastDone = *lastDone
				}
				s.LastDoneAt = deref(doneAt)
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("pgledger: summarize %q: %w", s.Job, err)
		}
	}
	return out, nil
}

// ListPage implements [idemstore.Pager]: a range of the job's primary key,
// from its latest period down. The records carry no Value.
func (l *core) ListPage(ctx context.Context, q idemstore.PageQuery) ([]idemstore.Record, error) {
	if err := idemstore.ValidateJob(q.Job); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("pgledger: ListPage of %q: Limit %d, want more than 0", q.Job, q.Limit)
	}
	statuses := make([]string, len(q.Statuses))
	for i, s := range q.Statuses {
		statuses[i] = string(s)
	}
	recs := []idemstore.Record{}
	err := l.db.query(ctx, `SELECT period, status, attempt, failures, owner, lease_until, not_before, last_error, updated, fingerprint, revision FROM `+pgx.Identifier{l.schema, "runs"}.Sanitize()+`
		WHERE job = $1 AND ($2 = '' OR period < $2) AND period >= $3 AND ($4 = '' OR status = ANY(string_to_array($4, ',')))
		ORDER BY period DESC LIMIT $5`,
		[]any{q.Job, q.Before, q.From, strings.Join(statuses, ","), int64(q.Limit)}, func(scan func(...any) error) error {
			r := idemstore.Record{Key: idemstore.Key{Job: q.Job}}
			var status string
			var lease, notBefore, updated *time.Time
			err := scan(&r.Key.Period, &status, &r.Attempt, &r.Failures, &r.Owner,
				&lease, &notBefore, &r.LastError, &updated, &r.Fingerprint, &r.Revision)
			r.Status = idemstore.Status(status)
			r.LeaseUntil, r.NotBefore, r.Updated = deref(lease), deref(notBefore), deref(updated)
			recs = append(recs, r)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("pgledger: list a page of %q: %w", q.Job, err)
	}
	return recs, nil
}
