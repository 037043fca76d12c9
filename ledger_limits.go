package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// limitsSchema is the shared limits' tables (version 6; package limit):
// a rate limit's theoretical arrival time, and the held slots of an
// "at once" limit.
const limitsSchema = `
CREATE TABLE IF NOT EXISTS idem_limit_rates (
	name TEXT PRIMARY KEY,
	tat  INTEGER NOT NULL -- unix nanoseconds
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_limit_slots (
	name    TEXT    NOT NULL,
	slot    INTEGER NOT NULL,
	owner   TEXT    NOT NULL,
	token   TEXT    NOT NULL,
	expires INTEGER NOT NULL, -- unix nanoseconds
	PRIMARY KEY (name, slot)
) WITHOUT ROWID;
`

var _ idemstore.LimitStore = ledgerStore{}

// TakeRate implements [idemstore.LimitStore] on the ledger's clock.
func (l ledgerStore) TakeRate(ctx context.Context, name string, r idemstore.Rate, n int, maxWait time.Duration) (wait time.Duration, reserved bool, err error) {
	err = l.withTx(ctx, false, func(tx *wtx) error {
		var tat int64
		if err := tx.queryRow(`SELECT tat FROM idem_limit_rates WHERE name = ?`, name).Scan(&tat); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var next time.Time
		next, wait, reserved = idemstore.TakeRate(time.Unix(0, tat), l.clock.Now(), r, n, maxWait)
		if !reserved {
			return nil
		}
		_, err := tx.exec(`INSERT INTO idem_limit_rates(name, tat) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET tat = excluded.tat`, name, next.UnixNano())
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("idem: %s: rate limit %q: %w", l.where(), name, err)
	}
	return wait, reserved, nil
}

// AcquireSlot implements [idemstore.LimitStore] on the ledger's clock.
func (l ledgerStore) AcquireSlot(ctx context.Context, name string, max int, h idemstore.SlotHolder, lease time.Duration) (slot int, ok bool, wait time.Duration, err error) {
	err = l.withTx(ctx, true, func(tx *wtx) error {
		now := l.clock.Now()
		rows, err := tx.QueryContext(ctx, `SELECT slot, owner, expires FROM idem_limit_slots WHERE name = ? ORDER BY slot`, name)
		if err != nil {
			return err
		}
		type held struct {
			slot    int
			owner   string
			expires int64
		}
		var all []held
		for rows.Next() {
			var s held
			if err := rows.Scan(&s.slot, &s.owner, &s.expires); err != nil {
				rows.Close()
				return err
			}
			all = append(all, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		live := map[int]bool{}
		first := time.Duration(-1)
		for _, s := range all {
			left := time.Unix(0, s.expires).Sub(now)
			if left > 0 && !idemstore.HolderGone(s.owner) {
				live[s.slot] = true
				if first < 0 || left < first {
					first = left
				}
			}
		}
		if len(live) >= max {
			wait = first
			return nil
		}
		for slot = 0; live[slot]; slot++ {
		}
		ok = true
		_, err = tx.exec(`INSERT INTO idem_limit_slots(name, slot, owner, token, expires) VALUES(?, ?, ?, ?, ?)
			ON CONFLICT(name, slot) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires = excluded.expires`,
			name, slot, h.Owner, h.Token, now.Add(lease).UnixNano())
		return err
	})
	if err != nil {
		return 0, false, 0, fmt.Errorf("idem: %s: limit %q: acquire a slot: %w", l.where(), name, err)
	}
	return slot, ok, wait, nil
}

// RenewSlot implements [idemstore.LimitStore].
func (l ledgerStore) RenewSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder, lease time.Duration) (held bool, err error) {
	err = l.withTx(ctx, true, func(tx *wtx) error {
		res, err := tx.exec(`UPDATE idem_limit_slots SET expires = ? WHERE name = ? AND slot = ? AND token = ?`,
			l.clock.Now().Add(lease).UnixNano(), name, slot, h.Token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		held = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("idem: %s: limit %q: renew slot %d: %w", l.where(), name, slot, err)
	}
	return held, nil
}

// ReleaseSlot implements [idemstore.LimitStore].
func (l ledgerStore) ReleaseSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder) error {
	err := l.withTx(ctx, true, func(tx *wtx) error {
		_, err := tx.exec(`DELETE FROM idem_limit_slots WHERE name = ? AND slot = ? AND token = ?`, name, slot, h.Token)
		return err
	})
	if err != nil {
		return fmt.Errorf("idem: %s: limit %q: release slot %d: %w", l.where(), name, slot, err)
	}
	return nil
}
