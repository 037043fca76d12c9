package pgledger

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

// The wake marks of idemstore.Waker, in table meta: a row per job ever
// woken (idemstore.WakeMarkPrefix + job) holding the counter's value
// (row idemstore.WakeCounter) when it was last woken. Rows of meta, not a
// table of their own: a process of the schema version before this one
// neither writes nor reads them.

var _ idemstore.Waker = (*core)(nil)

// wakeSQL moves the counter and writes the job's mark ($1 its row's
// name). The counter's row stays locked until the transaction ends, so
// the marks are numbered in the order their transactions commit: a poll
// that saw mark n sees every mark below it. It is a transaction's last
// lock (Resolve's, Rerun's), taken after the job's: no lock waits on it
// in a cycle.
const wakeSQL = `WITH c AS (INSERT INTO {s}.meta AS m (name, value) VALUES ('` + idemstore.WakeCounter + `', 1)
	ON CONFLICT (name) DO UPDATE SET value = m.value + 1 RETURNING value)
INSERT INTO {s}.meta AS m (name, value) SELECT $1, value FROM c
	ON CONFLICT (name) DO UPDATE SET value = excluded.value`

// wokenSQL reads the marks above $1. The counter's row (one lookup of
// the primary key) is read first; only when it moved are the marks'
// rows read (the table's few rows: the meta table has, besides the
// schema's version and the counter, a row per job ever woken).
const wokenSQL = `SELECT name, value FROM {s}.meta
	WHERE (SELECT value FROM {s}.meta WHERE name = '` + idemstore.WakeCounter + `') > $1
	AND left(name, 5) = '` + idemstore.WakeMarkPrefix + `' AND value > $1`

// wake writes job's wake mark in tx.
func (l *core) wake(ctx context.Context, t tx, job string) error {
	_, err := t.exec(ctx, l.oq(wakeSQL), idemstore.WakeMarkPrefix+job)
	return err
}

// Wake implements [idemstore.Waker].
func (l *core) Wake(ctx context.Context, job string) error {
	if err := idemstore.ValidateJob(job); err != nil {
		return err
	}
	if err := inTx(ctx, l.db, func(t tx) error { return l.wake(ctx, t, job) }); err != nil {
		return fmt.Errorf("pgledger: schema %q: wake %s: %w", l.schema, job, err)
	}
	return nil
}

// Woken implements [idemstore.Waker].
func (l *core) Woken(ctx context.Context, after int64) ([]string, int64, error) {
	var jobs []string
	next := after
	err := l.db.query(ctx, l.oq(wokenSQL), []any{after}, func(scan func(...any) error) error {
		var name string
		var v int64
		if err := scan(&name, &v); err != nil {
			return err
		}
		jobs = append(jobs, strings.TrimPrefix(name, idemstore.WakeMarkPrefix))
		next = max(next, v)
		return nil
	})
	if err != nil {
		return nil, after, fmt.Errorf("pgledger: schema %q: read wake marks: %w", l.schema, err)
	}
	return jobs, next, nil
}
