package pgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// Shift makes d pass for l: the database's clock cannot be faked, so every
// time l's schema stored moves back by d.
func Shift(t testing.TB, l SchemaLedger, d time.Duration) {
	t.Helper()
	if err := shiftTimes(l, d); err != nil {
		t.Fatalf("shift: %v", err)
	}
}

// shiftTimes moves back every time of l's schema by d in one round trip
// and one transaction (statements without arguments, sent together), whose
// commit does not wait for its WAL flush: the model test shifts around most
// of its operations, and no test crashes the server.
//
// The shift locks every row while the ledger's own transactions may hold
// some (a window's item ends, locked in the window's order) and wait for
// others: it gives up after waiting 50 ms for a lock (lock_timeout, far
// below the server's deadlock_timeout of 1 s), so a wait cycle with a
// ledger's transaction ends in the shift, never in the ledger's, and is
// tried again, for a minute at most.
func shiftTimes(l SchemaLedger, d time.Duration) error {
	by := fmt.Sprintf("(%d * interval '1 microsecond')", d.Microseconds())
	q := `SELECT set_config('synchronous_commit', 'off', true), set_config('lock_timeout', '50ms', true);
	UPDATE ` + Table(l, "runs") + ` SET lease_until = lease_until - ` + by + `,
		not_before = not_before - ` + by + `, created = created - ` + by + `, updated = updated - ` + by + `;
	UPDATE ` + Table(l, "item_chunks") + ` SET lease_until = lease_until - ` + by + `;
	UPDATE ` + Table(l, "item_state") + ` SET lease_until = lease_until - ` + by + `, not_before = not_before - ` + by + `;
	UPDATE ` + Table(l, "outbox") + fmt.Sprintf(` SET lease_until = CASE WHEN lease_until > 0 THEN lease_until - %[1]d ELSE 0 END,
		not_before = CASE WHEN not_before > 0 THEN not_before - %[1]d ELSE 0 END WHERE lease_until > 0 OR not_before > 0`, d.Microseconds())
	deadline := time.Now().Add(time.Minute)
	for tries := 1; ; tries++ {
		err := ExecIn(context.Background(), l, q)
		var pe interface{ SQLState() string } // pgconn's and lib/pq's errors alike
		if !errors.As(err, &pe) || (pe.SQLState() != "55P03" && pe.SQLState() != "40P01") {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shift by %v: still waiting for the ledger's row locks after %d tries: %w", d, tries, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// KitShift is the conformance kits' Shift: d passes on the database's clock
// for s's leases and deadlines.
func KitShift(t *testing.T, s idem.Store, d time.Duration) {
	if err := shiftTimes(s.(SchemaLedger), d); err != nil {
		t.Errorf("shift: %v", err) // maybe not on the test's goroutine: no Fatal
	}
}
