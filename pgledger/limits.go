package pgledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/idemstore"
)

var (
	_ idemstore.LimitStore = (*Ledger)(nil)
	_ idemstore.LimitStore = (*DBLedger)(nil)
)

// The limits shared by every process (version 6; package limit): a rate
// limit's theoretical arrival time (tat), and the held places of an "at
// once" limit. Times are the server's clock_timestamp(), so that the
// processes' clocks need not agree; durations arrive as microseconds
// (times are kept to the microsecond).
const (
	limitsDDL = `
CREATE TABLE IF NOT EXISTS {s}.limit_rates (
	name text COLLATE "C" PRIMARY KEY,
	tat  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.limit_slots (
	name    text COLLATE "C" NOT NULL,
	slot    integer NOT NULL,
	owner   text NOT NULL,
	token   text NOT NULL,
	expires timestamptz NOT NULL,
	PRIMARY KEY (name, slot)
);`

	// takeRateSQL is TakeRate, the generic cell rate algorithm
	// (idemstore.TakeRate) in one statement: it locks the limit's row (the
	// latest version: a concurrent taker waits for it, then reads what the
	// first stored), moves tat on by $2 microseconds (n intervals) from
	// max(tat, now), and stores it only if the wait that gives, next - now
	// - burst intervals, is within maxWait: next - now <= $3 (burst
	// intervals plus maxWait, in microseconds). It returns now, next and
	// whether it stored next; no row when the limit has no row yet
	// (limitRateInsertSQL creates it).
	takeRateSQL = `WITH cur AS MATERIALIZED (
		SELECT tat, clock_timestamp() AS now FROM {s}.limit_rates WHERE name = $1 FOR UPDATE
	), calc AS MATERIALIZED (
		SELECT now, greatest(tat, now) + $2::float8 * interval '1 microsecond' AS next FROM cur
	), up AS (
		UPDATE {s}.limit_rates AS r SET tat = calc.next FROM calc
		WHERE r.name = $1 AND calc.next - calc.now <= $3::float8 * interval '1 microsecond'
		RETURNING 1
	)
	SELECT now, next, EXISTS (SELECT FROM up) FROM calc`

	// limitRateInsertSQL creates a rate limit's row (tat now: nothing
	// taken), unless it exists.
	limitRateInsertSQL = `INSERT INTO {s}.limit_rates (name, tat) VALUES ($1, clock_timestamp())
	ON CONFLICT (name) DO NOTHING`

	// limitLockSQL serializes AcquireSlot per limit until the transaction
	// ends: a place that no row holds yet cannot be locked as a row.
	limitLockSQL = `SELECT pg_advisory_xact_lock($1)`

	// limitSlotsSQL reads a limit's held places, locked (a RenewSlot or
	// ReleaseSlot of one waits until AcquireSlot commits, then finds it
	// as AcquireSlot left it), with the microseconds left of their leases.
	limitSlotsSQL = `SELECT slot, owner, (extract(epoch FROM expires - clock_timestamp()) * 1000000)::float8
	FROM {s}.limit_slots WHERE name = $1 ORDER BY slot FOR UPDATE`

	// limitTakeSlotSQL takes place $2 for holder ($3, $4) with a lease of
	// $5 microseconds, over whatever held it before.
	limitTakeSlotSQL = `INSERT INTO {s}.limit_slots AS s (name, slot, owner, token, expires)
	VALUES ($1, $2, $3, $4, clock_timestamp() + $5::float8 * interval '1 microsecond')
	ON CONFLICT (name, slot) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires = excluded.expires`

	limitRenewSlotSQL = `UPDATE {s}.limit_slots SET expires = clock_timestamp() + $4::float8 * interval '1 microsecond'
	WHERE name = $1 AND slot = $2 AND token = $3`

	limitReleaseSlotSQL = `DELETE FROM {s}.limit_slots WHERE name = $1 AND slot = $2 AND token = $3`
)

// TakeRate implements [idemstore.LimitStore] on the server's clock, in
// one statement (one round trip) once the limit has a row; the first take
// of a limit creates it first.
func (l *core) TakeRate(ctx context.Context, name string, r idemstore.Rate, n int, maxWait time.Duration) (wait time.Duration, reserved bool, err error) {
	iv := r.Interval()
	for range 3 {
		var now, next time.Time
		err = l.db.queryRow(ctx, l.oq(takeRateSQL), []any{name, micros(time.Duration(n) * iv), micros(time.Duration(r.Burst)*iv + maxWait)},
			&now, &next, &reserved)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err = l.db.exec(ctx, l.oq(limitRateInsertSQL), name); err != nil {
				break
			}
			continue
		}
		if err != nil {
			break
		}
		wait = max(next.Sub(now)-time.Duration(r.Burst)*iv, 0)
		if !reserved {
			// The SQL decided on microseconds: never answer "not
			// reserved, ask again at once".
			return max(wait-maxWait, time.Microsecond), false, nil
		}
		return wait, true, nil
	}
	if err == nil {
		err = errors.New("its row vanished as it was created (dropped meanwhile?)")
	}
	return 0, false, fmt.Errorf("pgledger: schema %q: rate limit %q: %w", l.schema, name, err)
}

// AcquireSlot implements [idemstore.LimitStore] on the server's clock, in
// one transaction: it locks the limit (an advisory lock on its name) and
// its held places, decides in Go which are live (lease not ended, and
// [idemstore.HolderGone] false for their owner), and takes the lowest
// number that is not.
func (l *core) AcquireSlot(ctx context.Context, name string, max int, h idemstore.SlotHolder, lease time.Duration) (slot int, ok bool, wait time.Duration, err error) {
	err = inTx(ctx, l.db, func(t tx) error {
		slot, ok, wait = 0, false, 0
		if _, err := t.exec(ctx, limitLockSQL, l.lockID("limit", name)); err != nil {
			return err
		}
		live := map[int]bool{}
		first := time.Duration(-1)
		err := t.query(ctx, l.oq(limitSlotsSQL), []any{name}, func(scan func(dest ...any) error) error {
			var n int
			var owner string
			var leftUs float64
			if err := scan(&n, &owner, &leftUs); err != nil {
				return err
			}
			left := time.Duration(leftUs * float64(time.Microsecond))
			if left > 0 && !idemstore.HolderGone(owner) {
				live[n] = true
				if first < 0 || left < first {
					first = left
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(live) >= max {
			wait = first
			return nil
		}
		for slot = 0; live[slot]; slot++ {
		}
		if _, err := t.exec(ctx, l.oq(limitTakeSlotSQL), name, slot, h.Owner, h.Token, micros(lease)); err != nil {
			return err
		}
		ok = true
		return nil
	})
	if err != nil {
		return 0, false, 0, fmt.Errorf("pgledger: schema %q: limit %q: acquire a slot: %w", l.schema, name, err)
	}
	return slot, ok, wait, nil
}

// RenewSlot implements [idemstore.LimitStore].
func (l *core) RenewSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder, lease time.Duration) (held bool, err error) {
	n, err := l.db.exec(ctx, l.oq(limitRenewSlotSQL), name, slot, h.Token, micros(lease))
	if err != nil {
		return false, fmt.Errorf("pgledger: schema %q: limit %q: renew slot %d: %w", l.schema, name, slot, err)
	}
	return n == 1, nil
}

// ReleaseSlot implements [idemstore.LimitStore].
func (l *core) ReleaseSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder) error {
	if _, err := l.db.exec(ctx, l.oq(limitReleaseSlotSQL), name, slot, h.Token); err != nil {
		return fmt.Errorf("pgledger: schema %q: limit %q: release slot %d: %w", l.schema, name, slot, err)
	}
	return nil
}
