package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idemgo/idem/idemstore"
)

// The wake marks of idemstore.Waker, in the ledger's table idem_meta: a
// row per job ever woken (idemstore.WakeMarkPrefix + job) holding the
// counter's value (idemstore.WakeCounter) when it was last woken. Rows of
// idem_meta, not a table of their own: a ledger of the schema version
// before this one has the table, and a process of that version neither
// writes nor reads them.

var _ idemstore.Waker = ledgerStore{}

// wakeJob writes job's wake mark in tx: the counter's next value. SQLite
// has one writer at a time, so the marks are numbered in commit order.
func wakeJob(tx *wtx, job string) error {
	if _, err := tx.exec(`INSERT INTO idem_meta(name, value) VALUES(?, 1)
		ON CONFLICT(name) DO UPDATE SET value = value + 1`, idemstore.WakeCounter); err != nil {
		return err
	}
	_, err := tx.exec(`INSERT INTO idem_meta(name, value) SELECT ?, value FROM idem_meta WHERE name = ?
		ON CONFLICT(name) DO UPDATE SET value = excluded.value`, idemstore.WakeMarkPrefix+job, idemstore.WakeCounter)
	return err
}

// Wake implements [idemstore.Waker].
func (l ledgerStore) Wake(ctx context.Context, job string) error {
	if err := idemstore.ValidateJob(job); err != nil {
		return err
	}
	err := l.withTx(ctx, true, func(tx *wtx) error { return wakeJob(tx, job) })
	if err != nil {
		return fmt.Errorf("idem: %s: wake %s: %w", l.where(), job, err)
	}
	return nil
}

// wokenSQL reads the marks above ?: the range of idem_meta's primary key
// that holds the rows of the jobs ever woken (and no other).
const wokenSQL = `SELECT name, value FROM idem_meta WHERE name >= 'wake/' AND name < 'wake0' AND value > ?`

// Woken implements [idemstore.Waker].
func (l ledgerStore) Woken(ctx context.Context, after int64) ([]string, int64, error) {
	// The counter first: one lookup of the primary key, all a poll reads
	// while nothing was woken.
	var counter int64
	err := l.db.QueryRowContext(ctx, `SELECT value FROM idem_meta WHERE name = ?`, idemstore.WakeCounter).Scan(&counter)
	if errors.Is(err, sql.ErrNoRows) || err == nil && counter <= after {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, fmt.Errorf("idem: %s: read wake marks: %w", l.where(), err)
	}
	rows, err := l.db.QueryContext(ctx, wokenSQL, after)
	if err != nil {
		return nil, after, fmt.Errorf("idem: %s: read wake marks: %w", l.where(), err)
	}
	defer rows.Close()
	var jobs []string
	next := after
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, after, fmt.Errorf("idem: %s: read wake marks: %w", l.where(), err)
		}
		jobs = append(jobs, strings.TrimPrefix(name, idemstore.WakeMarkPrefix))
		next = max(next, v)
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("idem: %s: read wake marks: %w", l.where(), err)
	}
	return jobs, next, nil
}
