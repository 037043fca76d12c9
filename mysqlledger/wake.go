package mysqlledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// The wake marks of idemstore.Waker (schema version 3): a row per job ever
// woken in the table wakes, holding the counter's value when it was last
// woken; the counter is the row idemstore.WakeCounter of meta. A process
// of version 2 (a rolling update) neither writes nor reads them: a reset
// it makes is seen at the job's next due time, as before.

var _ idemstore.Waker = (*Ledger)(nil)

// wake moves the counter and writes job's mark in tx: two statements, the
// counter's new value passed from the first to the second through the
// session's LAST_INSERT_ID. The counter's row stays locked until the
// transaction ends, so the marks are numbered in the order their
// transactions commit: a poll that saw mark n sees every mark below it.
// It is a transaction's last lock (Resolve's, Rerun's), taken after the
// key's and the job's: no lock waits on it in a cycle.
func (l *Ledger) wake(ctx context.Context, tx *sql.Tx, job string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.meta+` (name, version) VALUES ('`+idemstore.WakeCounter+`', LAST_INSERT_ID(1))
		ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1)`); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.wakes+` (job, mark) VALUES (?, LAST_INSERT_ID())
		ON DUPLICATE KEY UPDATE mark = LAST_INSERT_ID()`, job)
	return err
}

// Wake implements [idemstore.Waker].
func (l *Ledger) Wake(ctx context.Context, job string) error {
	if err := idemstore.ValidateJob(job); err != nil {
		return err
	}
	if err := l.inTx(ctx, func(tx *sql.Tx) error { return l.wake(ctx, tx, job) }); err != nil {
		return fmt.Errorf("mysqlledger: prefix %q: wake %s: %w", l.prefix, job, err)
	}
	return nil
}

// Woken implements [idemstore.Waker]: one read of wakes' index on mark.
func (l *Ledger) Woken(ctx context.Context, after int64) ([]string, int64, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT job, mark FROM `+l.t.wakes+` WHERE mark > ?`, after)
	if err != nil {
		return nil, after, fmt.Errorf("mysqlledger: prefix %q: read wake marks: %w", l.prefix, err)
	}
	defer rows.Close()
	var jobs []string
	next := after
	for rows.Next() {
		var job string
		var mark int64
		if err := rows.Scan(&job, &mark); err != nil {
			return nil, after, fmt.Errorf("mysqlledger: prefix %q: read wake marks: %w", l.prefix, err)
		}
		jobs = append(jobs, job)
		next = max(next, mark)
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("mysqlledger: prefix %q: read wake marks: %w", l.prefix, err)
	}
	return jobs, next, nil
}
