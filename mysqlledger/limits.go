package mysqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// TakeRate implements [idemstore.LimitStore]: the generic cell rate
// algorithm ([idemstore.TakeRate]) on the server's clock, in one UPDATE
// (takeRateSQLFor) that the server runs alone: the limit's row is locked
// only while the server runs it and commits, never across a round trip
// to this process, whose scheduling (a busy machine) would hold up every
// other taker of the limit.
func (l *Ledger) TakeRate(ctx context.Context, name string, r idemstore.Rate, n int, maxWait time.Duration) (wait time.Duration, reserved bool, err error) {
	iv := r.Interval()
	burst := time.Duration(r.Burst) * iv
	// Whole microseconds, on the limit's side: a step rounded up, the
	// reach rounded down.
	step := micros(time.Duration(n)*iv + time.Microsecond - 1)
	reach := micros(burst + maxWait)
	for range 3 {
		var res sql.Result
		var ans int64
		if res, err = l.exec(ctx, l.q.takeRate, step, step, reach, step, name); err != nil {
			break
		}
		if ans, err = res.LastInsertId(); err != nil {
			break
		}
		if ans == 0 { // no row: create it (nothing taken yet), then take
			if _, err = l.exec(ctx, `INSERT IGNORE INTO `+l.t.limitRates+` (name, tat) VALUES (?, 0)`, name); err != nil {
				break
			}
			continue
		}
		wait = max(time.Duration(ans>>1)*time.Microsecond-burst, 0)
		if ans&1 == 0 {
			// The SQL decided on microseconds: never answer "not
			// reserved, ask again at once".
			return max(wait-maxWait, time.Microsecond), false, nil
		}
		return wait, true, nil
	}
	if err == nil {
		err = errors.New("its row vanished as it was created (dropped meanwhile?)")
	}
	return 0, false, fmt.Errorf("mysqlledger: rate limit %q: %w", name, err)
}

// takeRateSQLFor returns TakeRate's statement on table limitRates. Its
// arguments: the step (n starts' intervals, microseconds) twice, the
// reach (burst and maxWait), the step again, the limit's name. next is
// GREATEST(tat, now) + step; the starts are reserved, and tat moved to
// next, when next - now <= reach. The answer, 2*(next-now) + reserved
// (never 0: the step is at least a microsecond), is passed to
// LAST_INSERT_ID(expr), whose value the server returns with the
// statement's result as its insert id (the MySQL manual's way to
// read a value an UPDATE computed without a second statement); an
// insert id of 0 means the row does not exist. now is the statement's
// start on the server's clock (UTC_TIMESTAMP is read once a statement).
func takeRateSQLFor(limitRates string) string {
	next := `GREATEST(tat, ` + nowSQL + `) + ?`
	return `UPDATE ` + limitRates + ` SET tat = IF(LAST_INSERT_ID(2 * (` + next + ` - ` + nowSQL + `) + (` + next + ` - ` + nowSQL + ` <= ?)) & 1, GREATEST(tat, ` + nowSQL + `) + ?, tat) WHERE name = ?`
}

// AcquireSlot implements [idemstore.LimitStore]: under the lock of the
// limit's rate row (created if needed), the limit's slots are read on the
// server's clock and a free one (never held, lease ended, or holder's
// process gone) is taken.
func (l *Ledger) AcquireSlot(ctx context.Context, name string, most int, h idemstore.SlotHolder, lease time.Duration) (slot int, ok bool, wait time.Duration, err error) {
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		slot, ok, wait = 0, false, 0
		// The limit's row in limit_rates serializes its slots' takers.
		var now, tat int64
		if err := l.lockRate(ctx, tx, name, &now, &tat); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT slot, owner, expires FROM `+l.t.limitSlots+` WHERE name = ? FOR UPDATE`, name)
		if err != nil {
			return err
		}
		held := map[int]bool{}
		var first int64 = -1
		for rows.Next() {
			var s int
			var owner string
			var expires int64
			if err := rows.Scan(&s, &owner, &expires); err != nil {
				rows.Close()
				return err
			}
			if expires > now && !idemstore.HolderGone(owner) {
				held[s] = true
				if first < 0 || expires < first {
					first = expires
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for s := 0; s < most; s++ {
			if held[s] {
				continue
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.limitSlots+` (name, slot, owner, token, expires) VALUES (?, ?, ?, ?, ?)
				ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), expires = VALUES(expires)`,
				name, s, h.Owner, h.Token, now+micros(lease))
			slot, ok = s, err == nil
			return err
		}
		if first > now {
			wait = time.Duration(first-now) * time.Microsecond
		}
		return nil
	})
	if err != nil {
		return 0, false, 0, fmt.Errorf("mysqlledger: limit %q: %w", name, err)
	}
	return slot, ok, wait, nil
}

// RenewSlot implements [idemstore.LimitStore].
func (l *Ledger) RenewSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder, lease time.Duration) (bool, error) {
	var held bool
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var expires, now int64
		err := tx.QueryRowContext(ctx, `SELECT expires, `+nowSQL+` FROM `+l.t.limitSlots+` WHERE name = ? AND slot = ? AND token = ? FOR UPDATE`,
			name, slot, h.Token).Scan(&expires, &now)
		if errors.Is(err, sql.ErrNoRows) {
			held = false
			return nil
		}
		if err != nil {
			return err
		}
		held = true
		_, err = tx.ExecContext(ctx, `UPDATE `+l.t.limitSlots+` SET expires = ? WHERE name = ? AND slot = ?`, now+micros(lease), name, slot)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mysqlledger: limit %q: renew slot %d: %w", name, slot, err)
	}
	return held, nil
}

// ReleaseSlot implements [idemstore.LimitStore].
func (l *Ledger) ReleaseSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder) error {
	if _, err := l.exec(ctx, `DELETE FROM `+l.t.limitSlots+` WHERE name = ? AND slot = ? AND token = ?`, name, slot, h.Token); err != nil {
		return fmt.Errorf("mysqlledger: limit %q: release slot %d: %w", name, slot, err)
	}
	return nil
}

// lockRate locks the limit's row in limit_rates (FOR UPDATE), creating it
// first if needed, and reads the server's time and the row's tat. It
// locks before it inserts: INSERT IGNORE of a row that exists takes a
// shared lock, and two transactions that hold it and then both ask for
// the exclusive one deadlock.
func (l *Ledger) lockRate(ctx context.Context, tx *sql.Tx, name string, now, tat *int64) error {
	return lockOrCreate(ctx, tx, `SELECT `+nowSQL+`, tat FROM `+l.t.limitRates+` WHERE name = ? FOR UPDATE`, []any{name}, []any{now, tat},
		`INSERT IGNORE INTO `+l.t.limitRates+` (name, tat) VALUES (?, 0)`, []any{name})
}

// lockOrCreate runs the locking read sel; if it finds no row, it runs the
// INSERT IGNORE ins and reads again.
func lockOrCreate(ctx context.Context, tx *sql.Tx, sel string, selArgs, dest []any, ins string, insArgs []any) error {
	err := tx.QueryRowContext(ctx, sel, selArgs...).Scan(dest...)
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, err := tx.ExecContext(ctx, ins, insArgs...); err != nil {
		return err
	}
	return tx.QueryRowContext(ctx, sel, selArgs...).Scan(dest...)
}
